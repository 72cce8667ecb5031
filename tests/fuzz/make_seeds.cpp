// SPDX-License-Identifier: MIT
// Writes a seed corpus for defrag_fuzz from a capture: runs of consecutive IP packets
// (raw link type), in the fuzzer's record format.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "pcap_io.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: defrag_fuzz_seeds CAPTURE DIR\n");
    return 2;
  }
  try {
    auto cap = defrag::pcap_io::read_capture(argv[1]);
    constexpr std::size_t run = 12;
    int files = 0;
    for (std::size_t first = 0; first < cap.packets.size(); first += run / 2) {
      // Raw link type, a policy, and every other eight through input_borrowed().
      std::vector<std::uint8_t> seed = {
          static_cast<std::uint8_t>(files % 8 | (files % 16 >= 8 ? 0x80 : 0))};
      for (std::size_t i = first; i < std::min(cap.packets.size(), first + run); ++i) {
        auto ip = cap.ip(cap.packets[i]);
        seed.push_back(static_cast<std::uint8_t>(ip.size() >> 8));
        seed.push_back(static_cast<std::uint8_t>(ip.size()));
        seed.push_back(1);
        seed.insert(seed.end(), ip.begin(), ip.end());
      }
      std::ofstream(std::string(argv[2]) + "/seed" + std::to_string(files++), std::ios::binary)
          .write(reinterpret_cast<const char*>(seed.data()),
                 static_cast<std::streamsize>(seed.size()));
    }
    std::printf("defrag_fuzz_seeds: %d seeds\n", files);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "defrag_fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
