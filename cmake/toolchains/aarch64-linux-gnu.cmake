# SPDX-License-Identifier: MIT
# Cross-compiling for 64-bit Arm Linux with Debian's and Ubuntu's cross compiler
# (g++-aarch64-linux-gnu), the tests run under qemu-user (qemu-user-static): the
# `aarch64` preset. Libraries and packages come from the target's root only
# (/usr/aarch64-linux-gnu), never from the build machine's.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# ctest (and add_test's COMMAND) run the target's programs through the emulator, with
# the target's libraries (-L: its dynamic loader and libc).
find_program(HOTPATH_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(HOTPATH_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${HOTPATH_QEMU_AARCH64} -L ${CMAKE_FIND_ROOT_PATH})
endif()
