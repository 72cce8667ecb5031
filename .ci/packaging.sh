#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# CI, packaging (called by .ci/run): what vcpkg, Conan and Debian users get, proved with
# what can run here. vcpkg and Conan cannot be installed on the CI machine, so the
# portfile and the recipe run against stand-ins for their tools that configure and
# install for real (tests/packaging/); the .deb is built, installed and removed for real.
set -euo pipefail
cd "$(dirname "$0")/.."
unset PKG_CONFIG_PATH CMAKE_PREFIX_PATH  # nothing may be found by accident

fail() { echo "packaging: FAILED: $*" >&2; exit 1; }
step() { echo "packaging: $*"; }

# dpkg, waiting (up to 5 minutes) while apt-get or dpkg elsewhere holds its lock.
dpkg_wait() {
  local err
  for _ in $(seq 150); do
    err=$(dpkg "$@" 2>&1 >/dev/null) && return 0
    grep -q "lock" <<<"$err" || break
    sleep 2
  done
  echo "$err" >&2
  return 1
}

# Every route below leaves the checkout as it found it (checked at the end).
status_before=$(git status --porcelain --ignored=no 2>/dev/null || true)

tmp=$(mktemp -d)
deb_installed=0
cleanup() {
  if [ "$deb_installed" = 1 ]; then dpkg_wait -r libhotpath-dev || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# configure_build <source> <build dir> [cmake args...]: configure and build quietly.
configure_build() {
  local src=$1 dir=$2
  shift 2
  cmake -S "$src" -B "$dir" -G Ninja "$@" >"$dir.log" 2>&1 || { cat "$dir.log"; fail "configuring $src"; }
  cmake --build "$dir" >>"$dir.log" 2>&1 || { cat "$dir.log"; fail "building $src"; }
}

# --- one version -----------------------------------------------------------------
version=$(sed -n 's/^project(hotpath VERSION \([0-9][0-9.]*\).*/\1/p' CMakeLists.txt)
[[ $version =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] || fail "no project(hotpath VERSION x.y.z)"
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
step "version $version (CMakeLists.txt)"

python3 - "$version" ports/hotpath/vcpkg.json <<'PY'
import json, sys
version, path = sys.argv[1:3]
with open(path, encoding="utf-8") as f:
    manifest = json.load(f)  # fails on anything but valid JSON
missing = [k for k in ("name", "version", "description", "license", "dependencies") if k not in manifest]
if missing:
    sys.exit(f"{path}: missing {missing}")
if manifest["name"] != "hotpath" or manifest["version"] != version:
    sys.exit(f"{path}: {manifest['name']} {manifest['version']}, CMakeLists.txt says hotpath {version}")
hosts = {d["name"] for d in manifest["dependencies"] if isinstance(d, dict) and d.get("host")}
if not {"vcpkg-cmake", "vcpkg-cmake-config"} <= hosts:
    sys.exit(f"{path}: vcpkg-cmake and vcpkg-cmake-config must be host dependencies")
PY
grep -q "^## \[$version\]" CHANGELOG.md || fail "CHANGELOG.md has no '## [$version]' section"
PYTHONPYCACHEPREFIX="$tmp/pycache" python3 -m py_compile conan/conanfile.py \
  conan/test_package/conanfile.py tests/packaging/run_conanfile.py
step "vcpkg.json, CHANGELOG.md and the Conan recipe agree; the recipe compiles"

# --- the vcpkg port and the Conan recipe: their own CMake calls, fresh prefixes ------
cmake -DPORT_DIR=ports/hotpath -DCURRENT_PACKAGES_DIR="$tmp/vcpkg" -DWORK_DIR="$tmp/vcpkg-work" \
  -P tests/packaging/run_portfile.cmake >/dev/null
# Each of vcpkg's post-build rules that the stand-in checks, on a port broken on purpose:
# the stand-in must fail, naming the rule.
broken_port() { # name, what the stand-in must say, CMake appended to the portfile
  local dir="$tmp/broken-$1" out
  mkdir -p "$dir/ports" && cp -r ports/hotpath "$dir/ports/"
  sed -i "s|^get_filename_component(SOURCE_PATH .*|set(SOURCE_PATH \"$PWD\")|" "$dir/ports/hotpath/portfile.cmake"
  printf '%s\n' "$3" >>"$dir/ports/hotpath/portfile.cmake"
  if out=$(cmake -DPORT_DIR="$dir/ports/hotpath" -DCURRENT_PACKAGES_DIR="$dir/pkg" \
    -DWORK_DIR="$dir/work" -P tests/packaging/run_portfile.cmake 2>&1); then
    fail "the vcpkg stand-in passes a port broken on purpose ($1)"
  fi
  grep -qF "$2" <<<"$out" || fail "broken port $1: the stand-in fails, but does not say '$2': $out"
}
cpd='${CURRENT_PACKAGES_DIR}'
broken_port pc_in_share "misplaced pkgconfig file share/pkgconfig/hotpath.pc" \
  "file(RENAME \"$cpd/lib/pkgconfig\" \"$cpd/share/pkgconfig\")
file(REMOVE_RECURSE \"$cpd/lib\")"
broken_port empty_dir "empty directory share/hotpath/empty" "file(MAKE_DIRECTORY \"$cpd/share/hotpath/empty\")"
broken_port path_in_cmake "in share/cmake/hotpath/hotpathConfig.cmake" \
  "file(APPEND \"$cpd/share/cmake/hotpath/hotpathConfig.cmake\" \"set(where \\\"$cpd\\\")\\n\")"
broken_port path_in_header "in include/hotpath/version.hpp" \
  "file(APPEND \"$cpd/include/hotpath/version.hpp\" \"#define HOTPATH_SOURCE \${SOURCE_PATH}\\n\")"
broken_port path_in_pc "in lib/pkgconfig/hotpath.pc" \
  "file(APPEND \"$cpd/lib/pkgconfig/hotpath.pc\" \"libdir=\${CURRENT_BUILDTREES_DIR}\\n\")"
broken_port no_copyright "no licence file share/hotpath/copyright" "file(REMOVE \"$cpd/share/hotpath/copyright\")"
broken_port usage_left_out "does not install it to share/hotpath/usage" "file(REMOVE \"$cpd/share/hotpath/usage\")"
broken_port no_headers "include/ is empty or missing" "file(REMOVE_RECURSE \"$cpd/include\")"
broken_port cmake_in_lib "CMake files in lib/cmake/" "file(WRITE \"$cpd/lib/cmake/hotpath/x.cmake\" \"\")"
broken_port debug_share "debug/include or debug/share installed" "file(WRITE \"$cpd/debug/share/hotpath/x\" \"x\")"
broken_port file_at_top "regular file README at the top" "file(WRITE \"$cpd/README\" \"x\")"
broken_port a_library "lib/ holds libhotpath.a" "file(WRITE \"$cpd/lib/libhotpath.a\" \"\")"
step "the vcpkg stand-in fails each of 12 ports broken on purpose, naming the rule"

port_options=$(sed -n 's/^option //p' "$tmp/vcpkg-work/portfile-calls.txt" | sort)
recipe_options=$(python3 tests/packaging/run_conanfile.py . "$tmp/conan" | sort)
wanted=$(printf '%s\n' -DHOTPATH_BUILD_BENCHMARKS=OFF -DHOTPATH_BUILD_EXAMPLES=OFF \
  -DHOTPATH_BUILD_TESTS=OFF)
[ "$port_options" = "$wanted" ] || fail "the portfile passes: $port_options"
[ "$recipe_options" = "$wanted" ] || fail "the recipe passes: $recipe_options"
mapfile -t options <<<"$port_options"
step "portfile and recipe configured and installed with ${options[*]}"

out=$(configure_build conan/test_package "$tmp/tp-vcpkg" -DCMAKE_PREFIX_PATH="$tmp/vcpkg" &&
  "$tmp/tp-vcpkg/test_package") || fail "test_package against the port's prefix: $out"
[[ $out == "hotpath $version: "*" ok" ]] || fail "test_package says: $out"
configure_build tests/consumer "$tmp/consumer-vcpkg" -DCMAKE_PREFIX_PATH="$tmp/vcpkg"
"$tmp/consumer-vcpkg/consumer" >/dev/null || fail "tests/consumer against the port's prefix"
# The recipe's package has no CMake files: Conan's would come from package_info().
out=$(configure_build conan/test_package "$tmp/tp-conan" -Dhotpath_DIR="$tmp/conan/deps" &&
  "$tmp/tp-conan/test_package") || fail "test_package against the recipe's package_info(): $out"
[[ $out == "hotpath $version: "*" ok" ]] || fail "test_package says: $out"
step "test_package and tests/consumer built and ran against both"

# The .pc where vcpkg keeps it (lib/pkgconfig), made relative by the fixup, gives the flags.
pc_flags=$(PKG_CONFIG_PATH="$tmp/vcpkg/lib/pkgconfig" pkg-config --cflags --libs hotpath) ||
  fail "pkg-config finds no hotpath in the port's lib/pkgconfig"
# shellcheck disable=SC2086
{ c++ tests/consumer/main.cpp $pc_flags -o "$tmp/vcpkg-pc" && "$tmp/vcpkg-pc" >/dev/null; } ||
  fail "pkg-config consumer against the port's prefix ($pc_flags)"
step "the port's lib/pkgconfig/hotpath.pc: $pc_flags"

# SameMajorVersion: this version and an older minor are accepted, the next major is not.
accept=("$version")
[ "$minor" -gt 0 ] && accept+=("$major.$((minor - 1))")
for want in "${accept[@]}"; do
  cmake -S tests/packaging/version_check -B "$tmp/want-$want" -DHOTPATH_WANT="$want" \
    -DCMAKE_PREFIX_PATH="$tmp/vcpkg" >"$tmp/want-$want.log" 2>&1 ||
    { cat "$tmp/want-$want.log"; fail "find_package(hotpath $want) against $version"; }
done
next="$((major + 1)).0"
if cmake -S tests/packaging/version_check -B "$tmp/want-$next" -DHOTPATH_WANT="$next" \
  -DCMAKE_PREFIX_PATH="$tmp/vcpkg" >"$tmp/want-$next.log" 2>&1; then
  fail "find_package(hotpath $next) accepted $version"
fi
grep -q "compatible with requested version \"$next\"" "$tmp/want-$next.log" ||
  { cat "$tmp/want-$next.log"; fail "find_package(hotpath $next) failed for another reason"; }
# And the other side of the rule: an installed next major does not satisfy this one
# (the installed version file, relabelled; AnyNewerVersion would accept it).
mkdir -p "$tmp/next-major/share/cmake"
cp -r "$tmp/vcpkg/share/cmake/hotpath" "$tmp/next-major/share/cmake/"
vfile="$tmp/next-major/share/cmake/hotpath/hotpathConfigVersion.cmake"
sed -i "s/\"${version//./\\.}\"/\"$next.0\"/g" "$vfile"
if ! grep -q "^set(PACKAGE_VERSION \"$next.0\")$" "$vfile" || grep -q "\"$version\"" "$vfile"; then
  fail "could not relabel hotpathConfigVersion.cmake as $next.0"
fi
if cmake -S tests/packaging/version_check -B "$tmp/old-want" -DHOTPATH_WANT="$version" \
  -DCMAKE_PREFIX_PATH="$tmp/next-major" >"$tmp/old-want.log" 2>&1; then
  fail "an installed $next.0 accepted a request for $version"
fi
grep -q "compatible with requested version \"$version\"" "$tmp/old-want.log" ||
  { cat "$tmp/old-want.log"; fail "find_package(hotpath $version) against $next.0 failed for another reason"; }
step "find_package(hotpath ${accept[*]}) accepted; $next refused by $version, $version by $next.0"

# --- examples, copied out of the tree -------------------------------------------------
# Each example is copied with examples/common/ beside it, as its CMakeLists.txt says.
for ex in quickstart qdisc act_skbedit defrag; do
  [ -d "examples/$ex" ] || { step "examples/$ex: not in this tree"; continue; }
  [ -f "examples/$ex/CMakeLists.txt" ] || fail "examples/$ex has no CMakeLists.txt of its own"
  mkdir "$tmp/ex-$ex"
  cp -r "examples/$ex" examples/common "$tmp/ex-$ex/"
  configure_build "$tmp/ex-$ex/$ex" "$tmp/ex-$ex-build" -DCMAKE_PREFIX_PATH="$tmp/vcpkg"
done
"$tmp/ex-quickstart-build/hotpath-quickstart" >/dev/null || fail "copied quickstart"
"$tmp/ex-qdisc-build/hotpath-qdisc" --duration 0.05 --repeat 1 --senders 1,3 --swap-ms 5 \
  >/dev/null || fail "copied qdisc"
"$tmp/ex-act_skbedit-build/hotpath-act-skbedit" --ms 20 --repeat 1 >/dev/null ||
  fail "copied act_skbedit"
"$tmp/ex-defrag-build/hotpath-defrag" tests/data/defrag/kernel-seed1.pcap -w "$tmp/defrag.pcap" \
  >/dev/null || fail "copied defrag"
step "examples built from copies against the installed prefix"

# --- the Debian package -----------------------------------------------------------------
owned=(/usr/include/hotpath /usr/share/cmake/hotpath /usr/share/pkgconfig/hotpath.pc
  /usr/share/doc/libhotpath-dev)
for p in "${owned[@]}"; do
  [ ! -e "$p" ] || fail "$p exists before the package is installed (dpkg -r libhotpath-dev?)"
done
configure_build . "$tmp/deb" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr "${options[@]}"
(cd "$tmp/deb" && cpack -G DEB >/dev/null)
deb="$tmp/deb/libhotpath-dev_${version}-1_all.deb"
[ -f "$deb" ] || fail "cpack made no $deb"

info=$(dpkg-deb --info "$deb")
for field in "Package: libhotpath-dev" "Version: $version-1" "Architecture: all" \
  "Section: libdevel"; do
  grep -qx " $field" <<<"$info" || fail "dpkg-deb --info has no '$field'"
done
contents=$(dpkg-deb --contents "$deb" | awk '$1 !~ /^d/ {print $6}' | sort)
expected=$({
  (cd include && find hotpath -type f -name '*.hpp' | sed 's|^|./usr/include/|')
  printf './usr/share/cmake/hotpath/%s\n' hotpathConfig.cmake hotpathConfigVersion.cmake \
    hotpathTargets.cmake
  echo ./usr/share/pkgconfig/hotpath.pc
  echo ./usr/share/doc/libhotpath-dev/copyright
} | sort)
[ "$contents" = "$expected" ] ||
  fail "dpkg-deb --contents differs from the expected files:
$(diff <(echo "$expected") <(echo "$contents"))"
dpkg-deb --fsys-tarfile "$deb" | tar -xOf - ./usr/share/doc/libhotpath-dev/copyright |
  cmp -s - LICENSE || fail "copyright is not LICENSE"
step "$(basename "$deb"): fields and the $(wc -l <<<"$contents") files as expected"

deb_installed=1
dpkg_wait -i "$deb" || fail "dpkg -i"
configure_build tests/consumer "$tmp/deb-find" -DHOTPATH_CONSUME=find_package
grep -qx "hotpath_DIR:PATH=/usr/share/cmake/hotpath" "$tmp/deb-find/CMakeCache.txt" ||
  fail "find_package found hotpath elsewhere than /usr"
"$tmp/deb-find/consumer" >/dev/null || fail "find_package consumer against /usr"
[ "$(pkg-config --modversion hotpath)" = "$version" ] || fail "pkg-config --modversion hotpath"
# shellcheck disable=SC2046
c++ tests/consumer/main.cpp $(pkg-config --cflags --libs hotpath) -o "$tmp/deb-pc"
"$tmp/deb-pc" >/dev/null || fail "pkg-config consumer against /usr"
step "installed with dpkg -i; consumers built against /usr (find_package, pkg-config)"

dpkg_wait -r libhotpath-dev || fail "dpkg -r"
deb_installed=0
while read -r f; do
  [ ! -e "${f#.}" ] || fail "dpkg -r left ${f#.}"
done <<<"$contents"
for p in "${owned[@]}"; do
  [ ! -e "$p" ] || fail "dpkg -r left $p"
done
! dpkg-query -W -f='${Status}' libhotpath-dev 2>/dev/null | grep -q 'ok installed' ||
  fail "dpkg still lists libhotpath-dev as installed"
step "removed with dpkg -r: nothing left behind"

[ "$(git status --porcelain --ignored=no 2>/dev/null || true)" = "$status_before" ] ||
  fail "packaging left the checkout changed: $(git status --porcelain)"
echo "packaging: all green"
