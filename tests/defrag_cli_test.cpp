// SPDX-License-Identifier: MIT
// hotpath-defrag's command line: what it writes and reports, and bad options and bad
// captures.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "driver.hpp"
#include "hotpath/percpu.hpp"
#include "pcap_io.hpp"
#include "synthetic.hpp"
#include "verdict.hpp"

#include "support/defrag_capture_files.hpp"

namespace {

using namespace hotpath::test::defrag_capture;  // data_dir, temp_dir, fs, bytes, counter...

// ------------------------------------------------------------ the CLI

struct outcome {
  int status;
  std::string err;
};

outcome run_program(const std::string& args, const temp_dir& tmp) {
  std::string err_file = tmp / "stderr.txt";
  // Through the emulator that runs the build's programs, if any (a cross build: the
  // shell cannot exec the target's binary itself).
  std::string cmd = std::string(HOTPATH_DEFRAG_RUNNER) + " '" + HOTPATH_DEFRAG_PROGRAM + "' " +
                    args + " >'" + (tmp / "stdout.txt") + "' 2>'" + err_file + "'";
  int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, read_text(err_file)};
}

std::int64_t json_int(const std::string& json, const std::string& key) {
  std::size_t k = json.find("\"" + key + "\":");
  if (k == std::string::npos) return -1;
  return std::stoll(json.substr(k + key.size() + 3));
}

// The CLI writes what the in-process run delivers, in the same order, and its JSON has
// the keys the summary promises.
TEST(DefragCli, WritesTheDeliveredDatagrams) {
  temp_dir tmp;
  std::string in = (data_dir / "kernel-seed1.pcapng").string();
  auto o = run_program(
      "'" + in + "' -w '" + (tmp / "out.pcap") + "' --json '" + (tmp / "out.json") + "'", tmp);
  ASSERT_EQ(o.status, 0) << o.err;
  auto cap = defrag::pcap_io::read_capture(in);
  auto r = defrag::driver::run(cap, {});
  auto out = defrag::pcap_io::read_capture(tmp / "out.pcap");
  EXPECT_EQ(out.link_type, DLT_RAW);
  ASSERT_EQ(out.packets.size(), r.out.size());
  for (std::size_t i = 0; i < r.out.size(); ++i) {
    auto a = out.ip(out.packets[i]);
    auto b = r.datagram(r.out[i]);
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << "datagram " << i;
    EXPECT_EQ(out.packets[i].ts_ns, r.out[i].ts_ns);
  }
  std::string json = read_text(tmp / "out.json");
  EXPECT_EQ(json_int(json, "packets_in"), static_cast<std::int64_t>(cap.packets.size()));
  EXPECT_EQ(json_int(json, "datagrams_out"), static_cast<std::int64_t>(r.out.size()));
  EXPECT_EQ(json_int(json, "budget_bytes"), 4 << 20);
  EXPECT_GE(json_int(json, "peak_memory_bytes"), 0);
  for (std::string_view c : defrag::counter_names)
    EXPECT_GE(json_int(json, std::string(c)), 0) << c;
}

// --rss addresses reaches the driver: at 4 workers nothing is handed off (by default
// the capture's first fragments are), the same datagrams come out, the JSON says which.
TEST(DefragCli, RssByAddressesSteersNothing) {
  temp_dir tmp;
  const std::string in = (data_dir / "kernel-seed1.pcapng").string();
  std::string json[2];
  for (int by_addresses = 0; by_addresses < 2; ++by_addresses) {
    const std::string file = tmp / ("out" + std::to_string(by_addresses) + ".json");
    auto o = run_program(
        "'" + in + "' --threads 4 --json '" + file + "'" + (by_addresses ? " --rss addresses" : ""),
        tmp);
    ASSERT_EQ(o.status, 0) << o.err;
    json[by_addresses] = read_text(file);
  }
  EXPECT_NE(json[0].find("\"rss\": \"ports\""), std::string::npos);
  EXPECT_NE(json[1].find("\"rss\": \"addresses\""), std::string::npos);
  EXPECT_GT(json_int(json[0], "handed_off"), 0);
  EXPECT_EQ(json_int(json[1], "handed_off"), 0);
  EXPECT_EQ(json_int(json[1], "datagrams_out"), json_int(json[0], "datagrams_out"));
}

TEST(DefragCli, BadOptionsExit2) {
  temp_dir tmp;
  for (const char* args :
       {"--threads 0 x.pcap", "--bogus x.pcap", "", "--policy nope x.pcap", "--timeout -1 x.pcap",
        "a.pcap b.pcap", "--flood 3 x.pcap", "--synthetic --paired-with 1",
        "--synthetic --repeat 1 --paired-with 0", "--rss nope x.pcap"}) {
    auto o = run_program(args, tmp);
    EXPECT_EQ(o.status, 2) << args;
    EXPECT_NE(o.err.find("hotpath-defrag:"), std::string::npos) << args;
  }
}

// --paired-with: timed passes at a second worker count, beside the first count's, in the
// summary and the JSON; the first pass (the output) and the timed passes' count unchanged.
TEST(DefragCli, PairedPassesReportBothWorkerCounts) {
  defrag::synthetic::options so;
  so.datagrams = 200;
  const auto traffic = defrag::synthetic::generate(so);
  defrag::driver::run_options o;
  o.threads = 2;
  o.repeat = 4;
  const auto plain = defrag::driver::run(traffic.cap, o);
  o.paired_threads = 1;
  const auto paired = defrag::driver::run(traffic.cap, o);
  EXPECT_LT(plain.paired_speedup, 0);
  EXPECT_EQ(paired.pass_ns.size(), 1u + o.repeat);  // the paired passes are not mixed in
  EXPECT_GT(paired.ns_per_fragment, 0);
  EXPECT_GT(paired.paired_ns_per_fragment, 0);
  EXPECT_GT(paired.paired_speedup, 0);
  // The speedup is what the pairs say: each paired pass over the pass it ran beside.
  ASSERT_EQ(paired.paired_pass_ns.size(), std::size_t{o.repeat});
  std::vector<double> ratios;
  for (std::size_t i = 0; i < paired.paired_pass_ns.size(); ++i)
    ratios.push_back(static_cast<double>(paired.paired_pass_ns[i]) /
                     static_cast<double>(paired.pass_ns[i + 1]));
  EXPECT_DOUBLE_EQ(paired.paired_speedup, hotpath::measure::median(ratios));
  EXPECT_EQ(paired.first[counter::reasm_oks], plain.first[counter::reasm_oks]);
  EXPECT_EQ(paired.out.size(), plain.out.size());

  temp_dir tmp;
  auto r = run_program(
      "--synthetic --datagrams 200 --threads 2 --repeat 2 --paired-with 1 "
      "--json '" +
          (tmp / "out.json") + "'",
      tmp);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string json = read_text(tmp / "out.json");
  EXPECT_EQ(json_int(json, "paired_threads"), 1);
  for (const char* key : {"paired_ns_per_fragment", "paired_speedup"}) {
    const std::size_t k = json.find("\"" + std::string(key) + "\":");
    ASSERT_NE(k, std::string::npos) << key;
    EXPECT_GT(std::stod(json.substr(k + std::strlen(key) + 3)), 0) << key;
  }
  EXPECT_NE(read_text(tmp / "stdout.txt").find("paired passes"), std::string::npos);
}

TEST(DefragCli, RejectsWhatIsNotACapture) {
  temp_dir tmp;
  {
    std::ofstream(tmp / "garbage.pcap") << "this is not a capture file, not even close......";
    std::ofstream(tmp / "empty.pcap");
  }
  for (const char* name : {"garbage.pcap", "empty.pcap", "missing.pcap"}) {
    auto o = run_program("'" + (tmp / name) + "' -w '" + (tmp / "o.pcap") + "'", tmp);
    EXPECT_EQ(o.status, 1) << name;
    EXPECT_NE(o.err.find("not a readable pcap or pcapng capture"), std::string::npos) << o.err;
  }
  // A link type the program cannot strip (USER0).
  write_frames(tmp / "user0.pcap", 147, {bytes(40, 0x45)});
  auto o = run_program("'" + (tmp / "user0.pcap") + "'", tmp);
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.err.find("unsupported link type 147"), std::string::npos) << o.err;
}

// A file cut inside a record: the records before the cut are used, the cut is reported.
TEST(DefragCli, TruncatedCaptureKeepsTheRecordsBeforeTheCut) {
  temp_dir tmp;
  std::string whole = read_text(data_dir / "kernel-seed1.pcap");
  std::size_t cut = whole.size() / 2;
  std::ofstream(tmp / "cut.pcap", std::ios::binary) << whole.substr(0, cut);
  auto partial = defrag::pcap_io::read_capture(tmp / "cut.pcap");
  ASSERT_TRUE(partial.truncated);  // the half-way point lies inside a record
  auto o = run_program("'" + (tmp / "cut.pcap") + "' --json '" + (tmp / "o.json") + "'", tmp);
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.err.find("truncated"), std::string::npos) << o.err;
  std::string json = read_text(tmp / "o.json");
  EXPECT_EQ(json_int(json, "truncated_records"), 1);
  EXPECT_EQ(json_int(json, "frames_in"), partial.frames_in);
  auto full = defrag::pcap_io::read_capture((data_dir / "kernel-seed1.pcap").string());
  EXPECT_LT(partial.frames_in, full.frames_in);
  EXPECT_GT(partial.frames_in, 0);
}

// Malformed IP headers are counted as malformed, never delivered, never a crash.
TEST(DefragCli, CountsMalformedPackets) {
  temp_dir tmp;
  bytes short_v4 = {0x45, 0, 0, 12, 0, 0, 0, 0, 64, 17, 0, 0};  // 12 bytes of a 20-byte header
  bytes bad_ihl(40, 0);
  bad_ihl[0] = 0x43;  // IHL 3: shorter than the fixed header
  bad_ihl[3] = 40;
  bytes long_v4(40, 0);
  long_v4[0] = 0x45;
  long_v4[2] = 0x05;  // total length 1280, 40 bytes present
  bytes short_v6(30, 0);
  short_v6[0] = 0x60;
  bytes long_v6(48, 0);
  long_v6[0] = 0x60;
  long_v6[4] = 0x04;  // payload length 1024, 8 present
  long_v6[6] = 17;
  write_frames(tmp / "bad.pcap", DLT_RAW, {short_v4, bad_ihl, long_v4, short_v6, long_v6});
  auto o = run_program("'" + (tmp / "bad.pcap") + "' -w '" + (tmp / "o.pcap") + "' --json '" +
                           (tmp / "o.json") + "'",
                       tmp);
  EXPECT_EQ(o.status, 0) << o.err;
  std::string json = read_text(tmp / "o.json");
  EXPECT_EQ(json_int(json, "packets_in"), 5);
  EXPECT_EQ(json_int(json, "malformed"), 5);
  EXPECT_EQ(json_int(json, "datagrams_out"), 0);
}

}  // namespace
