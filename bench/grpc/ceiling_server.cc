// gRPC ceiling server for the cacheroute benchmark (bench/grpc/run.sh).
//
// Serves cacheroute.v1.CacheRoute's RecordArrival, SelectInjection and Route
// with the C++ completion-queue async API, doing no work: every call is
// answered with an empty response message and status OK, and every message
// of a RecordArrivals or Routes stream with one empty response. The
// throughput and latency it reaches are what the gRPC stack alone allows on
// this machine, the ceiling the C sidecar is compared against. Plan,
// GetRates, Forget and GetNodeProfile answer UNIMPLEMENTED (from one
// requested call per queue each); the other methods are never requested.
//
// Layout: one ServerCompletionQueue and one thread per --threads; each queue
// keeps --outstanding requested calls (or streams) per served method. A call
// object is reused for the next call once it has finished (its request
// message keeps its capacity).
//
// Stops cleanly on SIGTERM or SIGINT: the server is shut down (in-flight calls
// get a short grace period), then every queue is drained by its own thread.

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cacheroute/v1/cacheroute.grpc.pb.h"

namespace {

namespace pb = cacheroute::v1;
using Service = pb::CacheRoute::AsyncService;

// Everything put on a completion queue is a Tag; Next() hands back the tag
// and whether its operation succeeded.
class Tag {
 public:
  virtual ~Tag() = default;
  virtual void Proceed(bool ok) = 0;
};

// One completion queue and the thread that serves it. `draining` is only
// touched by that thread: once set, finished calls are freed, not re-armed.
struct Worker {
  std::unique_ptr<grpc::ServerCompletionQueue> cq;
  bool draining = false;
};

// Posted to each queue (via an Alarm) after the server has shut down; its
// thread then shuts the queue down itself, so no call can be re-armed on a
// queue that is already shut down.
class DrainTag final : public Tag {
 public:
  explicit DrainTag(Worker* w) : w_(w) {}
  void Proceed(bool) override {
    w_->draining = true;
    w_->cq->Shutdown();
  }

 private:
  Worker* w_;
};

// A unary call slot: requested, then answered, then requested again.
// kRequest is the generated Service::RequestXxx member (of a base of Service);
// kServed false answers UNIMPLEMENTED instead of OK.
template <class Req, class Resp, auto kRequest, bool kServed = true>
class UnaryCall final : public Tag {
 public:
  UnaryCall(Service* service, Worker* worker)
      : service_(service), worker_(worker) {
    Arm();
  }

  void Proceed(bool ok) override {
    if (!ok && !answering_) {  // request failed: the server is shutting down
      delete this;
      return;
    }
    if (!answering_) {  // a call arrived: answer it at once
      answering_ = true;
      if constexpr (kServed) {
        responder_->Finish(response_, grpc::Status::OK, this);
      } else {
        responder_->FinishWithError(
            grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                         "not served by the ceiling server"),
            this);
      }
      return;
    }
    // Finish completed (ok=false only means the client went away).
    if (worker_->draining) {
      delete this;
      return;
    }
    Arm();
  }

 private:
  void Arm() {
    answering_ = false;
    // A ServerContext serves one call; rebuild it (and the responder bound
    // to it) in place rather than allocating a new call object.
    responder_.reset();
    ctx_.emplace();
    responder_.emplace(&*ctx_);
    (service_->*kRequest)(&*ctx_, &request_, &*responder_, worker_->cq.get(),
                          worker_->cq.get(), this);
  }

  Service* service_;
  Worker* worker_;
  bool answering_ = false;
  std::optional<grpc::ServerContext> ctx_;
  std::optional<grpc::ServerAsyncResponseWriter<Resp>> responder_;
  Req request_;
  const Resp response_;  // always empty
};

// A bidirectional stream slot (RecordArrivals, Routes): each inbound message
// is answered with one empty response, in order. kRequest is the generated
// Service::RequestXxx member, as for UnaryCall. One read and one write may be in flight at once
// (gRPC's rule per stream), so reads and writes complete on their own tags;
// answers not yet written are a count, and past kMaxPending of them the slot
// stops reading, which lets HTTP/2 flow control push back on the client.
template <class Req, class Resp, auto kRequest>
class StreamCall final : public Tag {
 public:
  StreamCall(Service* service, Worker* worker)
      : service_(service), worker_(worker), read_(this), write_(this) {
    Arm();
  }

  // The call arrived (or, with ok false, the server is shutting down).
  void Proceed(bool ok) override {
    if (state_ == kRequested) {
      if (!ok) {
        delete this;
        return;
      }
      state_ = kOpen;
      Read();
      return;
    }
    // Finish completed.
    if (worker_->draining) {
      delete this;
      return;
    }
    Arm();
  }

 private:
  static constexpr int kMaxPending = 64;
  enum State { kRequested, kOpen, kFinishing };

  // Completion of a read or of a write, forwarded to the call.
  class Op final : public Tag {
   public:
    explicit Op(StreamCall* call) : call_(call) {}
    void Proceed(bool ok) override {
      this == &call_->read_ ? call_->ReadDone(ok) : call_->WriteDone(ok);
    }

   private:
    StreamCall* call_;
  };

  void Arm() {
    state_ = kRequested;
    reading_ = writing_ = false;
    read_closed_ = false;
    pending_ = 0;
    stream_.reset();
    ctx_.emplace();
    stream_.emplace(&*ctx_);
    (service_->*kRequest)(&*ctx_, &*stream_, worker_->cq.get(),
                          worker_->cq.get(), this);
  }

  void Read() {
    reading_ = true;
    stream_->Read(&request_, &read_);
  }

  void Write() {
    writing_ = true;
    stream_->Write(response_, &write_);
  }

  void ReadDone(bool ok) {
    reading_ = false;
    if (!ok) {  // the client half-closed, or the call is gone
      read_closed_ = true;
      MaybeFinish();
      return;
    }
    ++pending_;
    if (!writing_) Write();
    if (pending_ < kMaxPending) Read();
  }

  void WriteDone(bool ok) {
    writing_ = false;
    if (!ok) {  // the call is gone: stop answering, let the read fail too
      pending_ = 0;
      ctx_->TryCancel();
    } else {
      --pending_;
    }
    if (pending_ > 0) Write();
    if (!read_closed_ && !reading_ && pending_ < kMaxPending) Read();
    MaybeFinish();
  }

  void MaybeFinish() {
    if (state_ != kOpen || !read_closed_ || reading_ || writing_ || pending_)
      return;
    state_ = kFinishing;
    stream_->Finish(grpc::Status::OK, this);
  }

  Service* service_;
  Worker* worker_;
  Op read_;
  Op write_;
  State state_ = kRequested;
  bool reading_ = false;
  bool writing_ = false;
  bool read_closed_ = false;
  int pending_ = 0;
  std::optional<grpc::ServerContext> ctx_;
  std::optional<grpc::ServerAsyncReaderWriter<Resp, Req>> stream_;
  Req request_;
  const Resp response_;  // always empty
};

using RecordArrivalCall =
    UnaryCall<pb::RecordArrivalRequest, pb::RecordArrivalResponse,
              &Service::RequestRecordArrival>;
using SelectInjectionCall =
    UnaryCall<pb::SelectInjectionRequest, pb::SelectInjectionResponse,
              &Service::RequestSelectInjection>;
using RouteCall = UnaryCall<pb::RouteRequest, pb::RouteResponse,
                            &Service::RequestRoute>;
using RecordArrivalsStream =
    StreamCall<pb::RecordArrivalRequest, pb::RecordArrivalResponse,
               &Service::RequestRecordArrivals>;
using RoutesStream = StreamCall<pb::RouteRequest, pb::RouteResponse,
                                &Service::RequestRoutes>;
using PlanCall = UnaryCall<pb::PlanRequest, pb::PlanResponse,
                           &Service::RequestPlan, false>;
using GetRatesCall = UnaryCall<pb::GetRatesRequest, pb::GetRatesResponse,
                               &Service::RequestGetRates, false>;
using ForgetCall = UnaryCall<pb::ForgetRequest, pb::ForgetResponse,
                             &Service::RequestForget, false>;
using GetNodeProfileCall =
    UnaryCall<pb::GetNodeProfileRequest, pb::NodeProfile,
              &Service::RequestGetNodeProfile, false>;

void Serve(Worker* w) {
  void* tag;
  bool ok;
  while (w->cq->Next(&tag, &ok)) static_cast<Tag*>(tag)->Proceed(ok);
}

[[noreturn]] void Usage(const char* argv0, int rc) {
  std::fprintf(rc ? stderr : stdout,
               "usage: %s [--listen ADDR] [--threads N] [--outstanding N]\n"
               "  --listen ADDR      address to serve (default 127.0.0.1:50151)\n"
               "  --threads N        completion queues, one thread each\n"
               "                     (default: hardware concurrency)\n"
               "  --outstanding N    requested calls kept per method per queue\n"
               "                     (default 64)\n",
               argv0);
  std::exit(rc);
}

int ParsePositive(const char* argv0, const char* flag, const char* s) {
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 1 || v > 4096) {
    std::fprintf(stderr, "%s: %s wants an integer in 1..4096, got '%s'\n",
                 argv0, flag, s);
    std::exit(2);
  }
  return static_cast<int>(v);
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:50151";
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads < 1) threads = 1;
  int outstanding = 64;

  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: %s needs a value\n", argv[0], a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--listen") {
      listen = value();
    } else if (a == "--threads") {
      threads = ParsePositive(argv[0], "--threads", value());
    } else if (a == "--outstanding") {
      outstanding = ParsePositive(argv[0], "--outstanding", value());
    } else if (a == "-h" || a == "--help") {
      Usage(argv[0], 0);
    } else {
      std::fprintf(stderr, "%s: unknown argument '%s'\n", argv[0], a.c_str());
      Usage(argv[0], 2);
    }
  }

  // Block the stop signals before gRPC starts any thread, so every thread
  // inherits the mask and only sigwait() below receives them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  Service service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  // A port already in use must fail, not be shared with another server.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(&service);
  std::vector<Worker> workers(threads);
  for (auto& w : workers) w.cq = builder.AddCompletionQueue();
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "%s: cannot listen on %s\n", argv[0], listen.c_str());
    return 1;
  }

  for (auto& w : workers) {
    for (int i = 0; i < outstanding; ++i) {
      new RecordArrivalCall(&service, &w);
      new SelectInjectionCall(&service, &w);
      new RouteCall(&service, &w);
      new RecordArrivalsStream(&service, &w);
      new RoutesStream(&service, &w);
    }
    new PlanCall(&service, &w);
    new GetRatesCall(&service, &w);
    new ForgetCall(&service, &w);
    new GetNodeProfileCall(&service, &w);
  }
  std::vector<std::thread> pool;
  pool.reserve(workers.size());
  for (auto& w : workers) pool.emplace_back(Serve, &w);
  std::fprintf(stderr, "ceiling_server: listening on %s (%d threads)\n",
               listen.c_str(), threads);

  int sig = 0;
  sigwait(&stop, &sig);
  std::fprintf(stderr, "ceiling_server: %s, shutting down\n", strsignal(sig));

  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  // Every call is now finished or failed; let each thread close its queue.
  std::vector<DrainTag> drains;
  drains.reserve(workers.size());
  std::vector<grpc::Alarm> alarms(workers.size());
  for (size_t i = 0; i < workers.size(); ++i) {
    drains.emplace_back(&workers[i]);
    alarms[i].Set(workers[i].cq.get(), gpr_now(GPR_CLOCK_MONOTONIC),
                  &drains[i]);
  }
  for (auto& t : pool) t.join();
  return 0;
}
