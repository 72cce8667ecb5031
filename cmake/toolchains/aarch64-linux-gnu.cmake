# SPDX-License-Identifier: MIT
# Cross-compiling for 64-bit Arm Linux with Debian's and Ubuntu's cross compiler
# (g++-aarch64-linux-gnu), the tests run under qemu-user (qemu-user-static): the
# `aarch64` preset. Libraries come from the target's root (/usr/aarch64-linux-gnu) or
# from Debian's multiarch directories for arm64 (libpcap-dev:arm64 installs into
# /usr/lib/aarch64-linux-gnu, its headers into /usr/include, which the cross compiler
# searches too), never from the build machine's own (x86_64-linux-gnu) directories.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(HOTPATH_TARGET_ROOT /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH ${HOTPATH_TARGET_ROOT} /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# ctest (and add_test's COMMAND) run the target's programs through the emulator, with
# the target's libraries (-L: its dynamic loader and libc). The loader must load the
# libc of its own build: with arm64 multiarch packages installed, the build machine's
# ld.so.cache names /lib/aarch64-linux-gnu's libc6:arm64, whose version may differ from
# the cross root's (Debian 12: 2.36-9+deb12u14 against 2.36-8cross1; every lock test
# then hung), so the root's lib/ comes first; multiarch libraries (libpcap) after it.
find_program(HOTPATH_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(HOTPATH_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${HOTPATH_QEMU_AARCH64} -L ${HOTPATH_TARGET_ROOT} -E
                                    LD_LIBRARY_PATH=${HOTPATH_TARGET_ROOT}/lib)
endif()
