// ctest bench_grpc_owners: the load generator's owner draws. Seeded, so
// deterministic; the tolerances are 6+ standard deviations of the counts.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cacheroute/v1/cacheroute.pb.h"
#include "owners.h"

namespace {

int failures = 0;

void Expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    ++failures;
  }
}

// Zipf(s) over n: ranks 0..2 drawn at 1/(r+1)^s / H(n, s), none >= n.
void ZipfFrequencies(uint64_t n, double s) {
  const int kDraws = 1000000;
  loadgen::Rng rng(7);
  loadgen::Zipf zipf(n, s);
  std::vector<int> count(3);
  bool in_range = true;
  for (int i = 0; i < kDraws; ++i) {
    uint64_t r = zipf.Draw(&rng);
    in_range = in_range && r < n;
    if (r < 3) ++count[r];
  }
  double h = 0;
  for (uint64_t k = 1; k <= n; ++k) h += std::pow(static_cast<double>(k), -s);
  for (int r = 0; r < 3; ++r) {
    double p = std::pow(r + 1.0, -s) / h, got = count[r] / double(kDraws);
    double tol = 6 * std::sqrt(p * (1 - p) / kDraws) + 1e-4;
    Expect(std::fabs(got - p) <= tol, "zipf n=" + std::to_string(n) + " s=" +
                                          std::to_string(s) + " rank " + std::to_string(r) +
                                          ": " + std::to_string(got) + " vs " + std::to_string(p));
  }
  Expect(in_range, "zipf drew a rank >= n");
}

void Sources() {
  loadgen::OwnerSource fixed(loadgen::Dist::kFixed, 10, 1, 1, 0);
  loadgen::OwnerSource cycle(loadgen::Dist::kCycle, 3, 1, 1, 2);
  loadgen::OwnerSource uni(loadgen::Dist::kUniform, 4, 1, 1, 0);
  std::vector<int> seen(4);
  for (int i = 0; i < 4000; ++i) ++seen[uni.NextIndex()];
  for (int v : seen) Expect(v > 850 && v < 1150, "uniform over 4 is lopsided");
  Expect(fixed.NextIndex() == 0 && fixed.NextIndex() == 0, "fixed is not always 0");
  uint64_t a = cycle.NextIndex(), b = cycle.NextIndex(), c = cycle.NextIndex();
  Expect(a == 2 && b == 0 && c == 1, "cycle from 2 over 3 is not 2, 0, 1");
  // grpc_bench.py's _owner(0): the h2load scenarios' owner.
  Expect(loadgen::OwnerId(0) == 7070836379803831727LL, "OwnerId(0) differs from _owner(0)");
  Expect(loadgen::OwnerId(12345) >= 0, "OwnerId is negative");
}

void Body() {
  loadgen::OwnerSource cycle(loadgen::Dist::kCycle, 1000, 1, 1, 0);
  std::string bytes;
  loadgen::BuildBody(&cycle, 5, true, &bytes);
  cacheroute::v1::RecordArrivalRequest req;
  Expect(req.ParseFromString(bytes), "the body does not parse");
  Expect(req.owners_size() == 5 && req.omit_routes(), "the body lacks its 5 owners or omit_routes");
  for (int i = 0; i < req.owners_size(); ++i)
    Expect(req.owners(i) == loadgen::OwnerId(i), "owner " + std::to_string(i) + " is not OwnerId(i)");
}

}  // namespace

int main() {
  ZipfFrequencies(1000, 1.0);
  ZipfFrequencies(10000000, 2.0);
  ZipfFrequencies(1000000, 0.5);
  Sources();
  Body();
  if (failures) return 1;
  std::puts("owners_test: PASS");
  return 0;
}
