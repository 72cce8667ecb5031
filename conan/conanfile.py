# SPDX-License-Identifier: MIT
"""Conan 2 recipe for hotpath, a header-only C++20 library.

From a checkout:  conan create conan --build=missing -s compiler.cppstd=20
The version is read from project(VERSION) in ../CMakeLists.txt, never written here.
"""
import os
import re

from conan import ConanFile
from conan.errors import ConanException
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeToolchain
from conan.tools.files import copy, load, rmdir

required_conan_version = ">=2.0"


class HotpathConan(ConanFile):
    name = "hotpath"
    description = ("Header-only C++20 concurrency primitives from the Linux networking stack: "
                   "ticket, MCS, queued and priority locks, per-cpu counters, RCU-style cells")
    license = "MIT"
    url = "https://github.com/hotpath/hotpath"
    homepage = "https://github.com/hotpath/hotpath"
    topics = ("concurrency", "locks", "rcu", "per-cpu", "header-only")
    package_type = "header-library"
    # CMake needs a compiler to configure; package_id() drops all of them again.
    settings = "os", "arch", "compiler", "build_type"
    no_copy_source = True

    def set_version(self):
        if self.version:
            return
        cmakelists = load(self, os.path.join(self.recipe_folder, "..", "CMakeLists.txt"))
        found = re.search(r"project\(\s*hotpath\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", cmakelists)
        if not found:
            raise ConanException("no project(hotpath VERSION x.y.z) in CMakeLists.txt")
        self.version = found.group(1)

    def layout(self):
        # The recipe lives in conan/; the project is the directory above.
        self.folders.root = ".."
        self.folders.source = "."
        self.folders.build = os.path.join("build", "conan")
        self.folders.generators = os.path.join("build", "conan", "generators")

    def export_sources(self):
        root = os.path.join(self.recipe_folder, "..")
        for pattern in ("CMakeLists.txt", "LICENSE", "cmake/*", "include/*"):
            copy(self, pattern, root, self.export_sources_folder)

    def package_id(self):
        self.info.clear()

    def validate(self):
        check_min_cppstd(self, 20)

    def generate(self):
        toolchain = CMakeToolchain(self)
        toolchain.cache_variables["HOTPATH_BUILD_TESTS"] = False
        toolchain.cache_variables["HOTPATH_BUILD_BENCHMARKS"] = False
        toolchain.cache_variables["HOTPATH_BUILD_EXAMPLES"] = False
        toolchain.generate()

    def build(self):
        pass  # header-only: CMake only installs, in package()

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        cmake = CMake(self)
        cmake.configure()
        cmake.install()
        # Conan writes its own CMake and pkg-config files from package_info().
        rmdir(self, os.path.join(self.package_folder, "share"))

    def package_info(self):
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        self.cpp_info.set_property("cmake_file_name", "hotpath")
        self.cpp_info.set_property("cmake_target_name", "hotpath::hotpath")
        self.cpp_info.set_property("pkg_config_name", "hotpath")
        if self.settings.os in ("Linux", "FreeBSD"):
            self.cpp_info.system_libs = ["pthread"]
