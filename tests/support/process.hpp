// SPDX-License-Identifier: MIT
// The process around a test: its threads, and children it forks.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>

namespace hotpath::test {

// Threads of this process (/proc/self/task), or -1.
inline int threads_now() {
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d))
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

// The ids of this process's threads (/proc/self/task).
inline std::set<long> thread_ids() {
  std::set<long> ids;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ids.insert(std::strtol(e->d_name, nullptr, 10));
    closedir(d);
  }
  return ids;
}

// Whether thread `tid` of this process is blocked in futex(2), as
// /proc/self/task/TID/syscall says: parked, not napping in nanosleep, not running.
// Under an emulator (qemu-user) that file numbers the build machine's system calls,
// not ours: there the kernel function it sleeps in (wchan) names the futex instead.
inline bool parked(long tid) {
  const std::string task = "/proc/self/task/" + std::to_string(tid);
  auto first_word = [](const std::string& path) {
    std::string w;
    if (FILE* f = std::fopen(path.c_str(), "r")) {
      char word[64] = {};
      if (std::fscanf(f, "%63s", word) == 1) w = word;
      std::fclose(f);
    }
    return w;
  };
  const std::string word = first_word(task + "/syscall");
  char* end = nullptr;
  const long nr = std::strtol(word.c_str(), &end, 10);
  if (end != word.c_str() && nr == SYS_futex) return true;
  return first_word(task + "/wchan").find("futex") != std::string::npos;
}

// Waits for child `pid` to exit and returns its exit status: -1 if it died of a
// signal or did not exit within `limit` (it is then killed), -2 if pid is not a child.
inline int wait_child(pid_t pid, std::chrono::seconds limit = std::chrono::seconds(60)) {
  if (pid <= 0) return -2;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return -2;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace hotpath::test
