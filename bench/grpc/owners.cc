#include "owners.h"

#include <cmath>

#include "cacheroute/v1/cacheroute.pb.h"

namespace loadgen {

bool ParseDist(const std::string& s, Dist* out) {
  static const struct {
    const char* name;
    Dist dist;
  } kNames[] = {{"fixed", Dist::kFixed},
                {"cycle", Dist::kCycle},
                {"uniform", Dist::kUniform},
                {"zipf", Dist::kZipf}};
  for (const auto& n : kNames) {
    if (s == n.name) {
      *out = n.dist;
      return true;
    }
  }
  return false;
}

const char* DistName(Dist d) {
  switch (d) {
    case Dist::kFixed: return "fixed";
    case Dist::kCycle: return "cycle";
    case Dist::kUniform: return "uniform";
    case Dist::kZipf: return "zipf";
  }
  return "?";
}

static constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

static uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint64_t SplitMix(uint64_t* x) { return Mix(*x += kGolden); }

int64_t OwnerId(uint64_t i) {
  return static_cast<int64_t>(Mix((i + 1) * kGolden) & 0x7FFFFFFFFFFFFFFFull);
}

Rng::Rng(uint64_t seed) {
  for (auto& w : s_) w = SplitMix(&seed);
}

static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t Rng::Next() {
  uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

uint64_t Rng::Below(uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
}

double Rng::Unit() { return static_cast<double>((Next() >> 11) + 1) * 0x1.0p-53; }

// log1p(x)/x and expm1(x)/x, by series near 0 where the quotient loses digits.
static double Log1pOverX(double x) {
  return std::fabs(x) > 1e-8 ? std::log1p(x) / x
                             : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x));
}
static double Expm1OverX(double x) {
  return std::fabs(x) > 1e-8 ? std::expm1(x) / x
                             : 1 + x * 0.5 * (1 + x / 3 * (1 + 0.25 * x));
}

Zipf::Zipf(uint64_t n, double s) : n_(n), s_(s) {
  h_x1_ = HIntegral(1.5) - 1;
  h_n_ = HIntegral(static_cast<double>(n) + 0.5);
  sdiv_ = 2 - HIntegralInverse(HIntegral(2.5) - H(2));
}

double Zipf::H(double x) const { return std::exp(-s_ * std::log(x)); }

double Zipf::HIntegral(double x) const {
  double lx = std::log(x);
  return Expm1OverX((1 - s_) * lx) * lx;
}

double Zipf::HIntegralInverse(double x) const {
  double t = x * (1 - s_);
  if (t < -1) t = -1;  // rounding at the far end of the support
  return std::exp(Log1pOverX(t) * x);
}

uint64_t Zipf::Draw(Rng* rng) const {
  for (;;) {
    double u = h_n_ + rng->Unit() * (h_x1_ - h_n_);
    double x = HIntegralInverse(u);
    double kf = std::floor(x + 0.5);
    if (kf < 1) kf = 1;
    if (kf > static_cast<double>(n_)) kf = static_cast<double>(n_);
    if (kf - x <= sdiv_ || u >= HIntegral(kf + 0.5) - H(kf))
      return static_cast<uint64_t>(kf) - 1;
  }
}

OwnerSource::OwnerSource(Dist dist, uint64_t n, double zipf_s, uint64_t seed,
                         uint64_t start)
    : dist_(dist), n_(n), next_(start % n), rng_(seed),
      zipf_(n, dist == Dist::kZipf ? zipf_s : 1.0) {}

uint64_t OwnerSource::NextIndex() {
  switch (dist_) {
    case Dist::kFixed: return 0;
    case Dist::kCycle: {
      uint64_t i = next_;
      next_ = next_ + 1 == n_ ? 0 : next_ + 1;
      return i;
    }
    case Dist::kUniform: return rng_.Below(n_);
    case Dist::kZipf: return zipf_.Draw(&rng_);
  }
  return 0;
}

void BuildBody(OwnerSource* src, int k, bool omit_routes, std::string* out) {
  // One message per thread, reused: its repeated field keeps its capacity.
  thread_local cacheroute::v1::RecordArrivalRequest req;
  req.Clear();
  auto* owners = req.mutable_owners();
  owners->Reserve(k);
  for (int i = 0; i < k; ++i) owners->AddAlreadyReserved(src->NextOwner());
  req.set_omit_routes(omit_routes);
  out->clear();
  req.SerializeToString(out);
}

}  // namespace loadgen
