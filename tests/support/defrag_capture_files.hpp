// SPDX-License-Identifier: MIT
// What the tests of hotpath-defrag as a whole share (defrag_capture_test,
// defrag_steering_test, defrag_flood_test, defrag_cli_test): the data directory, the
// kernel's verdicts, a scratch directory, and captures written through libpcap.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "pcap_io.hpp"  // examples/defrag
#include "verdict.hpp"

namespace hotpath::test::defrag_capture {

namespace fs = std::filesystem;
using defrag::counter;
using bytes = std::vector<std::uint8_t>;

inline const fs::path data_dir = HOTPATH_DEFRAG_DATA;

inline std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

using defrag::verdict::udp_payload;

inline std::vector<defrag::verdict::expected_datagram> read_expected(const fs::path& p) {
  return defrag::verdict::read_expected(p.string());
}

struct temp_dir {
  fs::path path;
  temp_dir() {
    path = fs::temp_directory_path() / ("hotpath-defrag-test-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(reinterpret_cast<std::uintptr_t>(this)));
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// Writes frames with link type `dlt` through libpcap's own writer.
inline void write_frames(const std::string& file, int dlt, const std::vector<bytes>& frames,
                         std::uint32_t cut_last_to = 0) {
  pcap_t* dead = pcap_open_dead(dlt, 262144);
  ASSERT_NE(dead, nullptr);
  pcap_dumper_t* d = pcap_dump_open(dead, file.c_str());
  ASSERT_NE(d, nullptr) << pcap_geterr(dead);
  for (std::size_t i = 0; i < frames.size(); ++i) {
    pcap_pkthdr h{};
    h.ts.tv_sec = static_cast<time_t>(1000 + i);
    h.len = static_cast<bpf_u_int32>(frames[i].size());
    h.caplen = i + 1 == frames.size() && cut_last_to ? cut_last_to : h.len;
    pcap_dump(reinterpret_cast<u_char*>(d), &h, frames[i].data());
  }
  pcap_dump_close(d);
  pcap_close(dead);
}

}  // namespace hotpath::test::defrag_capture
