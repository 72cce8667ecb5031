# SPDX-License-Identifier: MIT
import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout


class HotpathTestConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    test_type = "explicit"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        # Built in the checkout's build/ (ignored by git), not in test_package/build:
        # `conan create` leaves the checkout as it found it.
        cmake_layout(self, build_folder=os.path.join("..", "..", "build", "conan-test_package"))

    def generate(self):
        toolchain = CMakeToolchain(self)
        toolchain.user_presets_path = False  # no CMakeUserPresets.json beside CMakeLists.txt
        toolchain.generate()
        CMakeDeps(self).generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        if can_run(self):
            self.run(os.path.join(self.cpp.build.bindir, "test_package"), env="conanrun")
