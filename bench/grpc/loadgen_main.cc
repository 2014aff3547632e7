// cacheroute-grpc-loadgen: drives RecordArrival (or RecordArrivals streams)
// with owners drawn from a seeded distribution and prints one JSON line of
// results. Exit status: 0 all calls OK, 1 any call failed, 2 usage error.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "loadgen.h"

namespace {

using loadgen::Options;

// One flag: where it lands and its bounds; --help is printed from these.
struct Flag {
  const char* name;
  enum Kind { kInt, kU32, kU64, kDouble, kString, kBool } kind;
  void* at;
  double min, max;
  const char* help;
};

std::string g_method = "unary", g_dist = "fixed";

// The flags bound to *o (the first call's o: there is one Options), and
// their number in *n.
Flag* Flags(Options* o, int* n) {
  static Flag flags[] = {
      {"target", Flag::kString, &o->target, 0, 0, "server address (default 127.0.0.1:50051)"},
      {"method", Flag::kString, &g_method, 0, 0, "unary (RecordArrival) or stream (RecordArrivals)"},
      {"dist", Flag::kString, &g_dist, 0, 0, "owners: fixed, cycle, uniform or zipf over --ids"},
      {"ids", Flag::kU64, &o->ids, 1, 1e12, "owner index space [0, N) (default 1000000)"},
      {"zipf-s", Flag::kDouble, &o->zipf_s, 0.01, 10, "Zipf exponent s (default 1)"},
      {"owners", Flag::kInt, &o->owners, 1, 100000, "owners per call or stream message (default 1)"},
      {"omit-routes", Flag::kBool, &o->omit_routes, 0, 0, "set omit_routes"},
      {"check", Flag::kBool, &o->check, 0, 0, "check each answer's recorded= and route count"},
      {"concurrency", Flag::kInt, &o->concurrency, 1, 100000,
       "unary: calls in flight in all; stream: messages in flight per stream (default 8)"},
      {"streams", Flag::kInt, &o->streams, 1, 4096, "streams open at once, stream mode (default 1)"},
      {"threads", Flag::kInt, &o->threads, 1, 64, "client threads, one queue each (default 1)"},
      {"connections", Flag::kInt, &o->connections, 0, 4096, "TCP connections; 0 = --threads"},
      {"duration", Flag::kDouble, &o->duration_s, 0, 3600,
       "measured seconds (default 1); 0 with --count 0 = no load (install only)"},
      {"count", Flag::kU64, &o->count, 0, 1e12, "measured calls instead of --duration; 0 = off"},
      {"warmup", Flag::kDouble, &o->warmup_s, 0, 3600, "seconds of load before measuring (default 0)"},
      {"seed", Flag::kU64, &o->seed, 0, 1.8e19, "random seed (default 1)"},
      {"ring", Flag::kInt, &o->ring, 0, 1000000,
       "pre-build N bodies and cycle them; 0 = build a new body per call (default)"},
      {"deadline", Flag::kDouble, &o->deadline_s, 0.01, 3600, "seconds per call (default 30)"},
      {"install-table", Flag::kU64, &o->install, 0, 1e9,
       "first Plan install=true with owners 0..N-1 (default 0 = no)"},
      {"install-rate", Flag::kDouble, &o->install_rate, 1e-9, 1e9, "their rate (default 1)"},
      {"install-shards", Flag::kU32, &o->install_shards, 1, 65536, "the table's shards (default 8)"},
  };
  *n = static_cast<int>(sizeof flags / sizeof flags[0]);
  return flags;
}

[[noreturn]] void Usage(Options* o, int rc) {
  FILE* f = rc ? stderr : stdout;
  std::fprintf(f, "usage: cacheroute-grpc-loadgen [--flag VALUE]...\n");
  int n;
  Flag* fl = Flags(o, &n);
  for (int i = 0; i < n; ++i)
    std::fprintf(f, "  --%-16s %s\n", fl[i].name, fl[i].help);
  std::exit(rc);
}

[[noreturn]] void Bad(const char* flag, const char* why, const char* v) {
  std::fprintf(stderr, "cacheroute-grpc-loadgen: --%s %s, got '%s'\n", flag, why, v);
  std::exit(2);
}

void Set(const Flag& f, const char* v) {
  if (f.kind == Flag::kString) {
    *static_cast<std::string*>(f.at) = v;
    return;
  }
  char* end = nullptr;
  double d = std::strtod(v, &end);
  if (end == v || *end || !(d >= f.min && d <= f.max)) {
    char why[96];
    std::snprintf(why, sizeof why, "wants a number in %g..%g", f.min, f.max);
    Bad(f.name, why, v);
  }
  if (f.kind == Flag::kDouble) {
    *static_cast<double*>(f.at) = d;
  } else if (d != static_cast<double>(static_cast<uint64_t>(d))) {
    Bad(f.name, "wants an integer", v);
  } else if (f.kind == Flag::kInt) {
    *static_cast<int*>(f.at) = static_cast<int>(d);
  } else if (f.kind == Flag::kU32) {
    *static_cast<uint32_t*>(f.at) = static_cast<uint32_t>(d);
  } else {
    *static_cast<uint64_t*>(f.at) = std::strtoull(v, nullptr, 10);
  }
}

void Parse(int argc, char** argv, Options* o) {
  int n;
  Flag* fl = Flags(o, &n);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") Usage(o, 0);
    std::string name = a.rfind("--", 0) == 0 ? a.substr(2) : "";
    std::string value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1), name.resize(eq), has_value = true;
    }
    const Flag* f = nullptr;
    for (int k = 0; k < n; ++k)
      if (name == fl[k].name) f = &fl[k];
    if (!f) {
      std::fprintf(stderr, "cacheroute-grpc-loadgen: unknown argument '%s'\n", a.c_str());
      Usage(o, 2);
    }
    if (f->kind == Flag::kBool) {
      *static_cast<bool*>(f->at) = !has_value || value == "1" || value == "true";
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) Bad(f->name, "needs a value", "");
      value = argv[++i];
    }
    Set(*f, value.c_str());
  }
  if (g_method != "unary" && g_method != "stream") Bad("method", "wants unary or stream", g_method.c_str());
  o->stream = g_method == "stream";
  if (!loadgen::ParseDist(g_dist, &o->dist)) Bad("dist", "wants fixed, cycle, uniform or zipf", g_dist.c_str());
}

// JSON string body: the error messages may hold quotes or newlines.
std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    out += c;
  }
  return out;
}

void Report(const Options& o, const loadgen::Result& r, double install_s) {
  double s = r.seconds > 0 ? r.seconds : 1e-9;
  std::printf(
      "{\"method\": \"%s\", \"dist\": \"%s\", \"ids\": %llu, \"owners\": %d, "
      "\"omit_routes\": %s, \"concurrency\": %d, \"streams\": %d, \"threads\": %d, "
      "\"bodies\": \"%s\", \"gen_us_per_call\": %.2f, \"install_s\": %.3f, "
      "\"calls\": %llu, \"seconds\": %.3f, \"calls_per_s\": %.0f, \"arrivals_per_s\": %.0f, "
      "\"p50_us\": %.1f, \"p99_us\": %.1f, \"errors\": %llu, \"first_error\": \"%s\"}\n",
      o.stream ? "stream" : "unary", loadgen::DistName(o.dist),
      static_cast<unsigned long long>(o.ids), o.owners, o.omit_routes ? "true" : "false",
      o.concurrency, o.stream ? o.streams : 0, o.threads,
      o.ring ? ("ring of " + std::to_string(o.ring)).c_str() : "new per call", r.gen_ns / 1e3,
      install_s, static_cast<unsigned long long>(r.calls), r.seconds, r.calls / s,
      r.arrivals / s, r.latency.QuantileUs(0.50), r.latency.QuantileUs(0.99),
      static_cast<unsigned long long>(r.errors), Escape(r.first_error).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  Parse(argc, argv, &o);
  double install_s = 0;
  if (o.install) {
    auto t0 = std::chrono::steady_clock::now();
    std::string err;
    if (!loadgen::InstallTable(o, &err)) {
      std::fprintf(stderr, "cacheroute-grpc-loadgen: installing the table: %s\n", err.c_str());
      return 1;
    }
    install_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  loadgen::Result r;
  if (o.duration_s > 0 || o.count > 0) loadgen::RunLoad(o, &r);
  Report(o, r, install_s);
  return r.errors ? 1 : 0;
}
