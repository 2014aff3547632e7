// The load generator's settings and results, shared by its option parser
// (loadgen_main.cc), its drivers (loadgen.cc) and its table installer.
#ifndef CACHEROUTE_BENCH_GRPC_LOADGEN_H
#define CACHEROUTE_BENCH_GRPC_LOADGEN_H

#include <cstdint>
#include <string>

#include "latency.h"
#include "owners.h"

namespace loadgen {

struct Options {
  std::string target = "127.0.0.1:50051";
  bool stream = false;         // RecordArrivals streams, else unary calls
  Dist dist = Dist::kFixed;
  uint64_t ids = 1000000;      // owner index space [0, ids)
  double zipf_s = 1.0;
  int owners = 1;              // K owners per call (per stream message)
  bool omit_routes = false;
  bool check = false;          // also check recorded= and the route count
  int concurrency = 8;         // unary: calls in flight in all;
                               // stream: messages in flight per stream
  int streams = 1;             // M streams (stream mode)
  int threads = 1;             // client threads, one completion queue each
  int connections = 0;         // channels (TCP connections); 0 = threads
  double duration_s = 1;       // measured seconds, unless count is set
  uint64_t count = 0;          // measured calls (messages); 0 = by duration
  double warmup_s = 0;         // seconds run before measuring
  uint64_t seed = 1;
  int ring = 0;                // pre-built bodies cycled; 0 = a new one each call
  double deadline_s = 30;      // per call (per stream: duration + this)
  uint64_t install = 0;        // Plan install=true with this many sessions first
  double install_rate = 1;     // their rate
  uint32_t install_shards = 8; // the planned table's n_shards
};

struct Result {
  uint64_t calls = 0;     // measured calls (stream messages) answered OK
  uint64_t arrivals = 0;  // owners in them
  uint64_t errors = 0;    // non-OK calls or failed checks, warm-up included
  std::string first_error;
  double seconds = 0;     // measured wall time
  double gen_ns = 0;      // client time building bodies per call (ring: 0)
  Latency latency;
};

// Runs the load described by `o` against o.target; every call is bounded by
// its deadline, so it returns within about warmup + duration + deadline.
// Fills *r; false (with r->first_error) when the channels did not connect.
bool RunLoad(const Options& o, Result* r);

// Plan{rates: OwnerId(0 .. o.install - 1) at o.install_rate, install: true},
// with warm slots for all of them; false with *err on any failure.
bool InstallTable(const Options& o, std::string* err);

}  // namespace loadgen

#endif
