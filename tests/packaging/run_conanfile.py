# SPDX-License-Identifier: MIT
"""Runs conan/conanfile.py without Conan (which CI cannot install).

The conan modules the recipe imports become stand-ins: the recipe's own methods run in
Conan's order (set_version, export_sources, layout, validate, generate, build, package,
package_id, package_info), CMake configures and installs for real with exactly the cache
variables the recipe sets, and the result is checked as Conan Center's hooks would. Then
it writes the CMake config file that Conan's CMakeDeps would make from package_info(), so
test_package can be built against what the recipe declares and nothing more. Last,
test_package's layout() and generate() run, to check that `conan create` would leave
the checkout as it found it (its build folder ignored by git, no CMakeUserPresets.json).

  python3 tests/packaging/run_conanfile.py <checkout> <fresh work dir>
prints the recipe's CMake options (ON/OFF), one a line, on stdout.
"""
import os
import re
import shutil
import subprocess
import sys
import types
from fnmatch import fnmatch


class ConanException(Exception):
    pass


class Settings:
    def __init__(self, values):
        self._values = values

    def __getattr__(self, name):
        return self._values[name]

    def get_safe(self, name):
        return self._values.get(name)


class CppInfo:
    def __init__(self):
        self.includedirs = ["include"]
        self.libdirs = ["lib"]
        self.bindirs = ["bin"]
        self.system_libs = []
        self.properties = {}

    def set_property(self, name, value):
        self.properties[name] = value


class Info:
    cleared = False

    def clear(self):
        self.cleared = True


class Folders:
    root = None
    source = ""
    build = ""
    generators = ""


class ConanFile:
    def __init__(self, settings):
        self.settings = settings
        self.info = Info()
        self.cpp_info = CppInfo()
        self.folders = Folders()
        self.version = None
        self.toolchain_variables = None
        self.user_presets_path = None
        self.requirements_seen = []

    def requires(self, reference):
        self.requirements_seen.append(reference)


def check_min_cppstd(conanfile, cppstd):
    have = conanfile.settings.get_safe("compiler.cppstd")
    if have is None or int(str(have).lstrip("gnu")) < int(cppstd):
        raise ConanException(f"needs C++{cppstd}, compiler.cppstd is {have}")


def copy(conanfile, pattern, src, dst):
    for base, _, files in os.walk(src):
        for name in files:
            rel = os.path.relpath(os.path.join(base, name), src)
            if fnmatch(rel, pattern):
                os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
                shutil.copy2(os.path.join(src, rel), os.path.join(dst, rel))


def load(conanfile, path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def rmdir(conanfile, path):
    shutil.rmtree(path, ignore_errors=True)


class CMakeToolchain:
    def __init__(self, conanfile):
        self._conanfile = conanfile
        self.cache_variables = {}
        # Conan writes this file beside the CMakeLists.txt unless it is set to False.
        self.user_presets_path = "CMakeUserPresets.json"

    def generate(self):
        self._conanfile.toolchain_variables = dict(self.cache_variables)
        self._conanfile.user_presets_path = self.user_presets_path


class CMakeDeps:
    def __init__(self, conanfile):
        pass

    def generate(self):
        pass


def cmake_layout(conanfile, generator=None, src_folder=".", build_folder="build"):
    # Conan's, for a single-configuration generator: build/<build_type>.
    build = os.path.join(build_folder, str(conanfile.settings.build_type))
    conanfile.folders.source = src_folder
    conanfile.folders.build = build
    conanfile.folders.generators = os.path.join(build, "generators")


def cmake_value(v):
    return ("ON" if v else "OFF") if isinstance(v, bool) else str(v)


class CMake:
    def __init__(self, conanfile):
        self._c = conanfile

    def configure(self):
        variables = [f"-D{k}={cmake_value(v)}" for k, v in self._c.toolchain_variables.items()]
        result = subprocess.run(
            ["cmake", "-S", self._c.source_folder, "-B", self._c.build_folder, "-G", "Ninja",
             "-DCMAKE_BUILD_TYPE=Release", *variables],
            capture_output=True, text=True, check=False)
        # Conan would not notice an ignored variable; a recipe should still set none.
        if result.returncode != 0 or "Manually-specified variables were not used" in result.stderr:
            raise ConanException(f"cmake configure: {result.stderr}")

    def install(self):
        subprocess.run(["cmake", "--install", self._c.build_folder, "--prefix",
                        self._c.package_folder], check=True, stdout=subprocess.DEVNULL)


def install_stubs():
    modules = {
        "conan": {"ConanFile": ConanFile},
        "conan.errors": {"ConanException": ConanException},
        "conan.tools": {},
        "conan.tools.build": {"check_min_cppstd": check_min_cppstd, "can_run": lambda c: True},
        "conan.tools.cmake": {"CMake": CMake, "CMakeToolchain": CMakeToolchain,
                              "CMakeDeps": CMakeDeps, "cmake_layout": cmake_layout},
        "conan.tools.files": {"copy": copy, "load": load, "rmdir": rmdir},
    }
    for name, attrs in modules.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        sys.modules[name] = module


def fail(message):
    sys.exit(f"run_conanfile.py: {message}")


def load_recipe(path):
    namespace = {"__name__": "conanfile"}
    with open(path, encoding="utf-8") as f:
        exec(compile(f.read(), path, "exec"), namespace)  # pylint: disable=exec-used
    recipes = [v for v in namespace.values()
               if isinstance(v, type) and issubclass(v, ConanFile) and v is not ConanFile]
    if len(recipes) != 1:
        fail(f"{path}: expected one ConanFile class")
    return recipes[0]


def check_test_package(checkout, recipe_folder, settings, version):
    """test_package as `conan create` runs it from the checkout: nothing lands in the tree."""
    folder = os.path.join(recipe_folder, "test_package")
    t = load_recipe(os.path.join(folder, "conanfile.py"))(settings)
    t.recipe_folder = folder
    t.tested_reference_str = f"hotpath/{version}"
    t.requirements()
    if t.requirements_seen != [t.tested_reference_str]:
        fail(f"test_package requires {t.requirements_seen}")
    t.layout()
    if hasattr(t, "generate"):
        t.generate()
    elif "CMakeToolchain" in getattr(t, "generators", ()):
        t.user_presets_path = "CMakeUserPresets.json"  # the generator's default
    if t.user_presets_path is not False:
        fail("test_package's CMakeToolchain writes CMakeUserPresets.json into the checkout "
             "(set user_presets_path = False)")
    build = os.path.normpath(os.path.join(folder, t.folders.build))
    ignored = os.path.join(checkout, "build")  # .gitignore: /build/
    if os.path.commonpath([build, ignored]) != ignored:
        fail(f"test_package builds in {os.path.relpath(build, checkout)}, "
             "which git does not ignore (use the checkout's build/)")


def main():
    checkout, work = (os.path.abspath(p) for p in sys.argv[1:3])
    if os.path.exists(work):
        fail(f"{work} exists: the recipe must package into a fresh folder")
    install_stubs()
    recipe_folder = os.path.join(checkout, "conan")
    recipe = load_recipe(os.path.join(recipe_folder, "conanfile.py"))

    def make(cppstd):
        c = recipe(Settings({"os": "Linux", "arch": "x86_64", "compiler": "gcc",
                             "build_type": "Release", "compiler.cppstd": cppstd}))
        c.recipe_folder = recipe_folder
        return c

    # validate() must refuse C++17 and accept C++20.
    try:
        make("17").validate()
        fail("validate() accepted compiler.cppstd=17")
    except ConanException:
        pass
    c = make("20")
    c.validate()

    if c.package_type != "header-library":
        fail(f"package_type is {c.package_type!r}")
    c.set_version()
    cmakelists = load(c, os.path.join(checkout, "CMakeLists.txt"))
    project_version = re.search(r"project\(\s*hotpath\s+VERSION\s+(\S+)", cmakelists).group(1)
    if c.version != project_version:
        fail(f"set_version() gave {c.version}, CMakeLists.txt says {project_version}")

    # conan create: export the sources, then configure and install from that copy.
    c.export_sources_folder = os.path.join(work, "es")
    os.makedirs(c.export_sources_folder)
    c.export_sources()
    c.layout()
    if c.folders.root != "..":
        fail("layout() must put the root one level above conan/")
    c.source_folder = c.export_sources_folder
    c.build_folder = os.path.join(work, "b")
    c.package_folder = os.path.join(work, "p")
    c.generate()
    c.build()
    c.package()
    c.package_id()
    if not c.info.cleared:
        fail("package_id() must clear the settings: one package for every configuration")
    c.package_info()

    props = c.cpp_info.properties
    if props.get("cmake_file_name") != "hotpath" or props.get("cmake_target_name") != "hotpath::hotpath":
        fail(f"package_info() properties: {props}")
    if c.cpp_info.libdirs or c.cpp_info.bindirs:
        fail("a header-only package declares no libdirs or bindirs")
    for f in ("licenses/LICENSE", "include/hotpath/hotpath.hpp", "include/hotpath/version.hpp"):
        if not os.path.isfile(os.path.join(c.package_folder, f)):
            fail(f"the package has no {f}")
    extra = sorted(set(os.listdir(c.package_folder)) - {"include", "licenses"})
    if extra:
        fail(f"the package holds more than include/ and licenses/: {extra}")

    # What CMakeDeps makes of package_info(): one config file, one imported target.
    deps = os.path.join(work, "deps")
    os.makedirs(deps)
    includes = " ".join(os.path.join(c.package_folder, d) for d in c.cpp_info.includedirs)
    with open(os.path.join(deps, f"{props['cmake_file_name']}-config.cmake"), "w",
              encoding="utf-8") as f:
        f.write(f"add_library({props['cmake_target_name']} INTERFACE IMPORTED)\n"
                f"set_target_properties({props['cmake_target_name']} PROPERTIES\n"
                f"  INTERFACE_INCLUDE_DIRECTORIES \"{includes}\"\n"
                f"  INTERFACE_LINK_LIBRARIES \"{';'.join(c.cpp_info.system_libs)}\")\n")
    check_test_package(checkout, recipe_folder, c.settings, c.version)
    for name, value in c.toolchain_variables.items():
        print(f"-D{name}={cmake_value(value)}")


if __name__ == "__main__":
    main()
