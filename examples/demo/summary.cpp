// SPDX-License-Identifier: MIT
// hotpath-demo-summary DIR: the last screen of the main job (`--target demo`). Reads what
// the demo's programs wrote into DIR (bench.json from hotpath-bench, qdisc.json,
// act_skbedit.json, defrag.json, flood.json) and prints one line per primitive and
// program: its headline against the baseline measured in the same run, and the doc
// that has the details. Exit status 1 if a file is missing or lacks a figure.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

// ------------------------------------------------------------ a small JSON reader
// Enough for the files above: objects, arrays, strings (escapes kept as read, but
// \" and \\), numbers, true, false, null.
struct value {
  enum class kind { null, boolean, number, string, array, object } k = kind::null;
  bool b = false;
  double n = 0;
  std::string s;
  std::vector<value> a;
  std::map<std::string, value> o;

  const value& operator[](const std::string& key) const {
    static const value none;
    auto it = o.find(key);
    return it == o.end() ? none : it->second;
  }
  bool has(const std::string& key) const { return o.count(key) != 0; }
};

class parser {
 public:
  explicit parser(std::string_view t) : t_(t) {}
  value parse() {
    value v = any();
    space();
    if (at_ != t_.size()) fail("trailing text");
    return v;
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw std::runtime_error(std::string("JSON: ") + what + " at offset " + std::to_string(at_));
  }
  void space() {
    while (at_ < t_.size() &&
           (t_[at_] == ' ' || t_[at_] == '\n' || t_[at_] == '\r' || t_[at_] == '\t'))
      ++at_;
  }
  bool eat(char c) {
    space();
    if (at_ < t_.size() && t_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  std::string str() {
    if (!eat('"')) fail("expected a string");
    std::string s;
    while (at_ < t_.size() && t_[at_] != '"') {
      if (t_[at_] == '\\' && at_ + 1 < t_.size()) ++at_;
      s += t_[at_++];
    }
    if (at_ == t_.size()) fail("unterminated string");
    ++at_;
    return s;
  }
  value any() {
    space();
    if (at_ >= t_.size()) fail("unexpected end");
    value v;
    char c = t_[at_];
    if (c == '{') {
      ++at_;
      v.k = value::kind::object;
      if (eat('}')) return v;
      do {
        std::string key = str();
        if (!eat(':')) fail("expected ':'");
        v.o[key] = any();
      } while (eat(','));
      if (!eat('}')) fail("expected '}'");
    } else if (c == '[') {
      ++at_;
      v.k = value::kind::array;
      if (eat(']')) return v;
      do
        v.a.push_back(any());
      while (eat(','));
      if (!eat(']')) fail("expected ']'");
    } else if (c == '"') {
      v.k = value::kind::string;
      v.s = str();
    } else if (t_.substr(at_, 4) == "true" || t_.substr(at_, 5) == "false") {
      v.k = value::kind::boolean;
      v.b = c == 't';
      at_ += v.b ? 4 : 5;
    } else if (t_.substr(at_, 4) == "null") {
      at_ += 4;
    } else {
      std::string num(t_.substr(at_, 40));
      char* end = nullptr;
      v.k = value::kind::number;
      v.n = std::strtod(num.c_str(), &end);
      if (end == num.c_str()) fail("unexpected character");
      at_ += static_cast<std::size_t>(end - num.c_str());
    }
    return v;
  }
  std::string_view t_;
  std::size_t at_ = 0;
};

value read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": missing (did a step of the demo fail?)");
  std::stringstream s;
  s << f.rdbuf();
  try {
    return parser(s.str()).parse();
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

double number(const value& v, const std::string& what) {
  if (v.k != value::kind::number || !std::isfinite(v.n))
    throw std::runtime_error("no figure for " + what);
  return v.n;
}

// ------------------------------------------------------------ formatting

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

// A ratio as people read it: 2 significant digits below 10, none above.
std::string ratio(double x) {
  if (x >= 10) return fmt("%.0fx", x);
  if (x >= 1) return fmt("%.1fx", x);
  return fmt("%.2fx", x);
}

void row(std::string_view what, const std::string& text, std::string_view doc) {
  std::printf("  %-14s %s  [%s]\n", std::string(what).c_str(), text.c_str(),
              std::string(doc).c_str());
}

// ------------------------------------------------------------ the benchmarks

class bench {
 public:
  explicit bench(const value& v) {
    for (const auto& b : v["benchmarks"].a)
      by_name_[b["name"].s] = &b;
  }
  // The first benchmark whose name starts with `prefix`.
  const value& get(const std::string& prefix) const {
    auto it = by_name_.lower_bound(prefix);
    if (it == by_name_.end() || it->first.compare(0, prefix.size(), prefix) != 0)
      throw std::runtime_error("bench.json has no " + prefix + "*");
    return *it->second;
  }
  double field(const std::string& prefix, const std::string& key) const {
    return number(get(prefix)[key], prefix + " " + key);
  }
  // `key` of `a` over `key` of `base`, as a ratio.
  std::string over(const std::string& a, const std::string& base, const std::string& key) const {
    return ratio(field(a, key) / field(base, key));
  }

 private:
  std::map<std::string, const value*> by_name_;
};

void locks(const bench& b) {
  std::puts(
      "locks: fair ops/s (twice the slowest thread's share), threads contending on one lock;\n"
      "  8 threads outnumber the cores, where a strict FIFO lock waits for a preempted waiter");
  for (const char* lock : {"queued_lock", "priority_lock", "mcs_lock", "ticket_lock"}) {
    const std::string l = lock;
    double un = b.field("uncontended/" + l, "items_per_second") /
                b.field("uncontended/tas", "items_per_second");
    double t2 = b.field("contended/" + l + "/threads:2/", "fair_ops/s") /
                b.field("contended/std::mutex/threads:2/", "fair_ops/s");
    double t8 = b.field("contended/" + l + "/threads:8/", "fair_ops/s") /
                b.field("contended/std::mutex/threads:8/", "fair_ops/s");
    row(l,
        "uncontended " + ratio(un) + " a test-and-set lock; 2 threads " + ratio(t2) +
            " std::mutex; 8 threads " + ratio(t8) + " std::mutex",
        l == "priority_lock" ? "docs/priority_lock.md" : "docs/locks.md");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::string_view(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: hotpath-demo-summary DIR (what `--target demo` wrote)\n");
    return argc == 2 ? 0 : 2;
  }
  const std::string dir = argv[1];
  try {
    const value bj = read_json(dir + "/bench.json");
    const value qd = read_json(dir + "/qdisc.json");
    const value sk = read_json(dir + "/act_skbedit.json");
    const value df = read_json(dir + "/defrag.json");
    const value fl = read_json(dir + "/flood.json");
    const bench b(bj);

    std::printf(
        "\nhotpath demo: what this machine measured (%s cores, load average %s at the "
        "start; every ratio against a baseline of the same run)\n\n",
        fmt("%.0f", number(qd["cores"], "cores")).c_str(), qd["loadavg_1min"].s.c_str());
    locks(b);

    const std::string pc = "percpu_concurrent/", rd = "read_", bt = "bucket_table/mix/";
    row("percpu_counter",
        "2 threads adding: " +
            b.over(pc + "percpu_counter_add/threads:2/", pc + "std_atomic_fetch_add/threads:2/",
                   "adds/s_both_running") +
            " the adds/s of one shared std::atomic fetch_add (while both threads run)",
        "docs/percpu_counter.md");
    row("rcu_cell",
        "2 threads reading: " +
            b.over(rd + "rcu_cell/threads:2", rd + "shared_mutex/threads:2", "items_per_second") +
            " std::shared_mutex, " +
            b.over(rd + "rcu_cell/threads:2", rd + "atomic_shared_ptr/threads:2",
                   "items_per_second") +
            " std::atomic<std::shared_ptr>",
        "docs/rcu.md");
    row("bucket_table",
        "2 threads, find/insert/erase: " +
            b.over(bt + "hotpath/threads:2/", bt + "std_mutex_unordered_map/threads:2/", "ops/s") +
            " std::unordered_map under one std::mutex",
        "docs/bucket_table.md");

    // The qdisc: priority against busylock at the most senders, each one's median round.
    double most = 0;
    for (const auto& r : qd["runs"].a)
      most = std::max(most, number(r["senders"], "qdisc senders"));
    const value *prio = nullptr, *busy = nullptr;
    for (const auto& r : qd["runs"].a) {
      if (!r["median"].b || r["senders"].n != most) continue;
      if (r["strategy"].s == "priority") prio = &r;
      if (r["strategy"].s == "busylock") busy = &r;
    }
    if (!prio || !busy) throw std::runtime_error("qdisc.json lacks priority or busylock");
    row("qdisc",
        fmt("%.0f", most) + " senders: priority_lock delivers " +
            ratio(number((*prio)["delivered_pps"], "priority pps") /
                  number((*busy)["delivered_pps"], "busylock pps")) +
            " busylock's packets/s; its transmit thread transmits " +
            fmt("%.0f%%", 100 * number((*prio)["tx_utilisation"], "tx share")) +
            " of its time (busylock's: " +
            fmt("%.0f%%", 100 * number((*busy)["tx_utilisation"], "tx share")) + ")",
        "docs/qdisc.md");

    const value* two = nullptr;
    for (const auto& r : sk["rows"].a)
      if (r["threads"].n == 2) two = &r;
    if (!two) throw std::runtime_error("act_skbedit.json has no 2-thread row");
    row("act_skbedit",
        "2 threads: rcu_cell + percpu_stats " +
            ratio(number((*two)["rcu_pps_per_thread"], "rcu pps") /
                  number((*two)["spinlock_pps_per_thread"], "spinlock pps")) +
            " the packets/s of one spinlock around parameters and statistics",
        "docs/rcu.md");

    // The defragmenter: the kernel's verdict, and its cost beside copying each packet once.
    const bool exact = df["expect_exact"].b;
    const double frag = number(df["ns_per_fragment"], "defrag ns_per_fragment");
    const double copy = number(df["copy_ns_per_fragment"], "defrag copy_ns_per_fragment");
    const double w = number(df["threads"], "defrag threads");
    row("defrag",
        fmt("%.0f", number(df["expect_matched"], "matched")) + " of " +
            fmt("%.0f", number(df["expect_datagrams"], "expected")) +
            " datagrams exactly as Linux delivered them" +
            (exact ? ""
                   : ", and " + fmt("%.0f", number(df["expect_extra"], "extra")) +
                         " it did not: DIFFERENT") +
            "; " + fmt("%.0f", w) + (w == 1 ? " worker " : " workers ") + fmt("%.0f", frag) +
            " ns per fragment, " + ratio(frag / copy) + " the " + fmt("%.0f", copy) +
            " ns of copying each packet once",
        "docs/defrag.md");
    const double sent = number(fl["legit_sent"], "flood legit_sent");
    row("defrag flood",
        "10 bogus fragments per legit one, 4 MiB budget: " +
            fmt("%.1f%%", 100 * number(fl["legit_delivered"], "legit_delivered") / sent) + " of " +
            fmt("%.0f", sent) + " legit datagrams delivered; peak memory " +
            fmt("%.0f%%", 100 * number(fl["peak_memory_bytes"], "peak") /
                              number(fl["budget_bytes"], "budget")) +
            " of the budget",
        "docs/defrag.md");
    std::puts("");
    return exact ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hotpath-demo-summary: %s\n", e.what());
    return 1;
  }
}
