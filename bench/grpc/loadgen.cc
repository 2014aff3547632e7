// The load generator's drivers: unary RecordArrival calls or RecordArrivals
// streams, kept in flight on one completion queue per client thread, with a
// new body per call (or one from a pre-built ring), any non-OK status or
// failed check counted as an error.
#include "loadgen.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cacheroute/v1/cacheroute.pb.h"

namespace loadgen {
namespace {

using Clock = std::chrono::steady_clock;
namespace pb = cacheroute::v1;

const char kUnary[] = "/cacheroute.v1.CacheRoute/RecordArrival";
const char kStream[] = "/cacheroute.v1.CacheRoute/RecordArrivals";

class Tag {
 public:
  virtual ~Tag() = default;
  virtual void Proceed(bool ok) = 0;
};

// What all threads share: when to stop issuing, and the first failure.
struct Shared {
  const Options* o;
  Clock::time_point measure_from, stop_at;
  std::atomic<uint64_t> issued{0};  // measured calls started (count mode)
  std::atomic<bool> failed{false};
  std::vector<grpc::ByteBuffer> ring;
};

// A call deadline `seconds` from now.
std::chrono::system_clock::time_point After(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             std::chrono::duration<double>(seconds));
}

grpc::ByteBuffer ToBuffer(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

// One client thread: its queue, its channels, its owners and its figures.
class Worker {
 public:
  Worker(Shared* sh, int index, std::vector<std::shared_ptr<grpc::Channel>> ch)
      : sh_(sh),
        src_(sh->o->dist, sh->o->ids, sh->o->zipf_s,
             sh->o->seed * 0x100000001B3ull + index,
             sh->o->ids / sh->o->threads * index),
        ring_pos_(sh->ring.empty() ? 0 : sh->ring.size() / sh->o->threads * index) {
    for (auto& c : ch) stubs_.emplace_back(new grpc::GenericStub(c));
  }

  grpc::CompletionQueue* cq() { return &cq_; }
  grpc::GenericStub* NextStub() { return stubs_[next_stub_++ % stubs_.size()].get(); }
  const Options& o() const { return *sh_->o; }

  // The next request body: a new one, or the ring's next.
  grpc::ByteBuffer Body() {
    if (!sh_->ring.empty()) return sh_->ring[ring_pos_++ % sh_->ring.size()];
    auto t0 = Clock::now();
    BuildBody(&src_, o().owners, o().omit_routes, &scratch_);
    grpc::ByteBuffer bb = ToBuffer(scratch_);
    gen_ns_ += std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    ++built_;
    return bb;
  }

  // Whether to start one more call now (claims it in count mode).
  bool MayIssue() {
    if (sh_->failed.load(std::memory_order_relaxed)) return false;
    auto now = Clock::now();
    if (o().count == 0) return now < sh_->stop_at;
    if (now < sh_->measure_from) return true;
    return sh_->issued.fetch_add(1, std::memory_order_relaxed) < o().count;
  }

  // One answer: status, then (with --check) its content.
  void Done(Clock::time_point start, const grpc::Status& st,
            grpc::ByteBuffer* resp) {
    std::string why;
    if (!st.ok()) {
      why = "status " + std::to_string(st.error_code()) + ": " + st.error_message();
    } else if (o().check) {
      why = CheckResponse(resp);
    }
    auto end = Clock::now();
    if (!why.empty()) {
      Fail(why);
      return;
    }
    if (start < sh_->measure_from) return;
    ++res_.calls;
    res_.arrivals += o().owners;
    res_.latency.Add(std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count());
    if (end > last_end_) last_end_ = end;
  }

  void Fail(const std::string& why) {
    if (res_.errors++ == 0) res_.first_error = why;
    sh_->failed.store(true, std::memory_order_relaxed);
  }

  void Loop(int active) {
    void* tag;
    bool ok;
    active_ = active;
    while (active_ > 0 && cq_.Next(&tag, &ok)) static_cast<Tag*>(tag)->Proceed(ok);
    cq_.Shutdown();
    while (cq_.Next(&tag, &ok)) {
    }
  }

  void Retire() { --active_; }

  Result* result() { return &res_; }
  Clock::time_point last_end() const { return last_end_; }
  double gen_ns_per_body() const { return built_ ? gen_ns_ / built_ : 0; }

 private:
  std::string CheckResponse(grpc::ByteBuffer* bb) {
    pb::RecordArrivalResponse msg;
    grpc::ProtoBufferReader reader(bb);
    if (!msg.ParseFromZeroCopyStream(&reader)) return "response does not parse";
    int routes = o().omit_routes ? 0 : o().owners;
    if (msg.recorded() != static_cast<uint32_t>(o().owners) || msg.routes_size() != routes)
      return "response recorded=" + std::to_string(msg.recorded()) + " routes=" +
             std::to_string(msg.routes_size()) + ", want " + std::to_string(o().owners) +
             " and " + std::to_string(routes);
    return "";
  }

  Shared* sh_;
  grpc::CompletionQueue cq_;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  size_t next_stub_ = 0;
  OwnerSource src_;
  size_t ring_pos_;
  std::string scratch_;
  double gen_ns_ = 0;
  uint64_t built_ = 0;
  int active_ = 0;
  Result res_;
  Clock::time_point last_end_{};
};

// One unary call slot: started, answered, started again until told to stop.
class UnaryCall final : public Tag {
 public:
  explicit UnaryCall(Worker* w) : w_(w) {}

  void Start() {
    ctx_ = std::make_unique<grpc::ClientContext>();
    ctx_->set_deadline(After(w_->o().deadline_s));
    resp_.Clear();
    start_ = Clock::now();
    rpc_ = w_->NextStub()->PrepareUnaryCall(ctx_.get(), kUnary, w_->Body(), w_->cq());
    rpc_->StartCall();
    rpc_->Finish(&resp_, &status_, this);
  }

  void Proceed(bool) override {
    w_->Done(start_, status_, &resp_);
    if (w_->MayIssue()) {
      Start();
    } else {
      w_->Retire();
    }
  }

 private:
  Worker* w_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> rpc_;
  grpc::ByteBuffer resp_;
  grpc::Status status_;
  Clock::time_point start_;
};

// One RecordArrivals stream with up to `concurrency` messages unanswered.
// gRPC allows one read and one write in flight per stream, so each has its
// own tag; answers come in order, so a FIFO of send times gives latencies.
class StreamCall {
 public:
  explicit StreamCall(Worker* w)
      : w_(w), start_(this, &StreamCall::Started), write_(this, &StreamCall::Wrote),
        read_(this, &StreamCall::ReadOne), half_close_(this, &StreamCall::HalfClosed),
        finish_(this, &StreamCall::Finished) {}

  void Start(double seconds) {
    ctx_.set_deadline(After(seconds));
    rw_ = w_->NextStub()->PrepareCall(&ctx_, kStream, w_->cq());
    rw_->StartCall(&start_);
  }

 private:
  using Step = void (StreamCall::*)(bool);
  class Op final : public Tag {
   public:
    Op(StreamCall* c, Step s) : c_(c), s_(s) {}
    void Proceed(bool ok) override { (c_->*s_)(ok); }

   private:
    StreamCall* c_;
    Step s_;
  };

  void Started(bool ok) {
    if (!ok) {  // no stream: Finish tells why
      read_closed_ = half_closed_ = true;
      MaybeFinish();
      return;
    }
    rw_->Read(&in_, &read_);
    Pump();
  }

  // Sends the next message if the window allows; half-closes once done.
  void Pump() {
    if (writing_ || half_closing_) return;
    if (!stopping_) {
      if (sent_.size() >= static_cast<size_t>(w_->o().concurrency)) return;
      if (w_->MayIssue()) {
        writing_ = true;
        sent_.push_back(Clock::now());
        rw_->Write(w_->Body(), &write_);
        return;
      }
      stopping_ = true;
    }
    half_closing_ = true;
    rw_->WritesDone(&half_close_);
  }

  void Wrote(bool ok) {
    writing_ = false;
    if (!ok) {  // the stream is broken: no more writes; Finish tells why
      stopping_ = half_closing_ = half_closed_ = true;
      MaybeFinish();
      return;
    }
    Pump();
  }

  void ReadOne(bool ok) {
    if (!ok) {  // the server ended the stream: stop sending, half-close
      read_closed_ = stopping_ = true;
      Pump();
      MaybeFinish();
      return;
    }
    if (sent_.empty()) {
      w_->Fail("RecordArrivals: an answer to no message");
    } else {
      w_->Done(sent_.front(), grpc::Status::OK, &in_);
      sent_.pop_front();
    }
    in_.Clear();
    rw_->Read(&in_, &read_);
    Pump();
  }

  void HalfClosed(bool) {
    half_closed_ = true;
    MaybeFinish();
  }

  void MaybeFinish() {
    if (finishing_ || !read_closed_ || writing_ || !half_closed_) return;
    finishing_ = true;
    rw_->Finish(&status_, &finish_);
  }

  void Finished(bool) {
    if (!status_.ok()) {
      w_->Done(Clock::now(), status_, nullptr);
    } else if (!sent_.empty()) {
      w_->Fail("RecordArrivals ended OK with " + std::to_string(sent_.size()) +
               " messages unanswered");
    }
    w_->Retire();
  }

  Worker* w_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> rw_;
  Op start_, write_, read_, half_close_, finish_;
  grpc::ByteBuffer in_;
  grpc::Status status_;
  std::deque<Clock::time_point> sent_;
  bool writing_ = false, stopping_ = false, half_closing_ = false;
  bool half_closed_ = false, read_closed_ = false, finishing_ = false;
};

std::shared_ptr<grpc::Channel> Connect(const Options& o, int index) {
  grpc::ChannelArguments args;
  // One TCP connection per channel, as h2load -c: no shared subchannels.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("cacheroute.loadgen.channel", index);
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(), args);
}

void BuildRing(const Options& o, Shared* sh) {
  OwnerSource src(o.dist, o.ids, o.zipf_s, o.seed, 0);
  std::string body;
  sh->ring.reserve(o.ring);
  for (int i = 0; i < o.ring; ++i) {
    BuildBody(&src, o.owners, o.omit_routes, &body);
    sh->ring.push_back(ToBuffer(body));
  }
}

// Starts this worker's share of the calls (unary) or streams.
void Launch(const Options& o, int t, Worker* w,
            std::vector<std::unique_ptr<UnaryCall>>* calls,
            std::vector<std::unique_ptr<StreamCall>>* streams) {
  int total = o.stream ? o.streams : o.concurrency;
  int mine = total / o.threads + (t < total % o.threads ? 1 : 0);
  double stream_s = o.warmup_s + (o.count ? 0 : o.duration_s) + o.deadline_s;
  int started = 0;
  for (int i = 0; i < mine; ++i) {
    if (o.stream) {  // a stream's messages are claimed one by one
      streams->emplace_back(new StreamCall(w));
      streams->back()->Start(stream_s);
    } else if (w->MayIssue()) {
      calls->emplace_back(new UnaryCall(w));
      calls->back()->Start();
    } else {
      break;
    }
    ++started;
  }
  w->Loop(started);
}

}  // namespace

bool RunLoad(const Options& o, Result* r) {
  Shared sh;
  sh.o = &o;
  if (o.ring > 0) BuildRing(o, &sh);
  int nconn = o.connections > 0 ? o.connections : o.threads;
  std::vector<std::shared_ptr<grpc::Channel>> chans;
  for (int i = 0; i < nconn; ++i) {
    chans.push_back(Connect(o, i));
    if (!chans.back()->WaitForConnected(After(10))) {
      r->first_error = "cannot connect to " + o.target;
      r->errors = 1;
      return false;
    }
  }
  std::vector<std::unique_ptr<Worker>> workers;
  for (int t = 0; t < o.threads; ++t) {
    std::vector<std::shared_ptr<grpc::Channel>> mine;
    for (int i = t; i < nconn; i += o.threads) mine.push_back(chans[i]);
    if (mine.empty()) mine.push_back(chans[t % nconn]);
    workers.emplace_back(new Worker(&sh, t, mine));
  }
  auto t0 = Clock::now();
  auto to = [](double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  sh.measure_from = t0 + to(o.warmup_s);
  sh.stop_at = sh.measure_from + to(o.duration_s);
  std::vector<std::vector<std::unique_ptr<UnaryCall>>> calls(o.threads);
  std::vector<std::vector<std::unique_ptr<StreamCall>>> streams(o.threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < o.threads; ++t)
    pool.emplace_back(Launch, std::cref(o), t, workers[t].get(), &calls[t], &streams[t]);
  for (auto& th : pool) th.join();

  Clock::time_point end = sh.measure_from;
  double gen = 0;
  for (auto& w : workers) {
    Result* wr = w->result();
    r->calls += wr->calls;
    r->arrivals += wr->arrivals;
    if (wr->errors && r->errors == 0) r->first_error = wr->first_error;
    r->errors += wr->errors;
    r->latency.Merge(wr->latency);
    if (w->last_end() > end) end = w->last_end();
    gen += w->gen_ns_per_body();
  }
  r->seconds = std::chrono::duration<double>(end - sh.measure_from).count();
  r->gen_ns = o.ring ? 0 : gen / o.threads;
  return true;
}

}  // namespace loadgen
