// The frame the benchmarks' grpc++ async servers share (ceiling_server.cc,
// bench/epp/noop_extproc.cc): completion-queue tags, one queue and one
// thread per worker, and a clean stop on SIGTERM or SIGINT (the server shut
// down with a short grace period, then each queue drained by its own
// thread, so no call is re-armed on a queue already shut down).
#ifndef CACHEROUTE_BENCH_GRPC_ASYNC_SERVER_H
#define CACHEROUTE_BENCH_GRPC_ASYNC_SERVER_H

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace bench {

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
// thread then shuts the queue down itself.
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

// A bidirectional stream slot, requested again once finished (CRTP:
// Derived gives the answers). One read and one write may be in flight at
// once (gRPC's rule per stream), so they complete on their own tags;
// answers not yet written are counted, and past kMaxPending of them the slot
// stops reading, which lets HTTP/2 flow control push back on the client.
// Derived provides:
//   void RequestCall(grpc::ServerContext*, grpc::ServerAsyncReaderWriter<Resp, Req>*, void* tag)
//   size_t Handle(Req&)    answers the message gives (0 or more)
//   const Resp& Front()    the next answer to write; void Pop() once written
//   void Reset()           forget every answer (a new call, or a broken one)
// and calls Arm() from its constructor.
template <class Derived, class Req, class Resp>
class DuplexSlot : public Tag {
 public:
  explicit DuplexSlot(Worker* worker) : worker_(worker), read_(this), write_(this) {}

  // The call arrived (or, with ok false, the server is shutting down), or
  // its Finish completed.
  void Proceed(bool ok) override {
    if (state_ == kRequested) {
      if (!ok) {
        delete static_cast<Derived*>(this);
        return;
      }
      state_ = kOpen;
      Read();
      return;
    }
    if (worker_->draining) {
      delete static_cast<Derived*>(this);
      return;
    }
    Arm();
  }

 protected:
  grpc::ServerCompletionQueue* cq() { return worker_->cq.get(); }

  void Arm() {
    state_ = kRequested;
    reading_ = writing_ = read_closed_ = false;
    pending_ = 0;
    self()->Reset();
    stream_.reset();
    ctx_.emplace();
    stream_.emplace(&*ctx_);
    self()->RequestCall(&*ctx_, &*stream_, this);
  }

 private:
  static constexpr size_t kMaxPending = 64;
  enum State { kRequested, kOpen, kFinishing };

  // Completion of a read or of a write, forwarded to the slot.
  class Op final : public Tag {
   public:
    explicit Op(DuplexSlot* s) : s_(s) {}
    void Proceed(bool ok) override { this == &s_->read_ ? s_->ReadDone(ok) : s_->WriteDone(ok); }

   private:
    DuplexSlot* s_;
  };

  Derived* self() { return static_cast<Derived*>(this); }

  void Read() {
    reading_ = true;
    stream_->Read(&request_, &read_);
  }

  void Write() {
    writing_ = true;
    stream_->Write(self()->Front(), &write_);
  }

  void ReadDone(bool ok) {
    reading_ = false;
    if (!ok) {  // the client half-closed, or the call is gone
      read_closed_ = true;
      MaybeFinish();
      return;
    }
    pending_ += self()->Handle(request_);
    if (!writing_ && pending_) Write();
    if (pending_ < kMaxPending) Read();
  }

  void WriteDone(bool ok) {
    writing_ = false;
    if (!ok) {  // the call is gone: stop answering, let the read fail too
      pending_ = 0;
      self()->Reset();
      ctx_->TryCancel();
    } else {
      self()->Pop();
      --pending_;
    }
    if (pending_ > 0) Write();
    if (!read_closed_ && !reading_ && pending_ < kMaxPending) Read();
    MaybeFinish();
  }

  void MaybeFinish() {
    if (state_ != kOpen || !read_closed_ || reading_ || writing_ || pending_) return;
    state_ = kFinishing;
    stream_->Finish(grpc::Status::OK, this);
  }

  Worker* worker_;
  Op read_;
  Op write_;
  State state_ = kRequested;
  bool reading_ = false;
  bool writing_ = false;
  bool read_closed_ = false;
  size_t pending_ = 0;
  std::optional<grpc::ServerContext> ctx_;
  std::optional<grpc::ServerAsyncReaderWriter<Resp, Req>> stream_;
  Req request_;
};

inline void Serve(Worker* w) {
  void* tag;
  bool ok;
  while (w->cq->Next(&tag, &ok)) static_cast<Tag*>(tag)->Proceed(ok);
}

// A flag's value in 1..4096, or exit 2 naming the flag.
inline int ParsePositive(const char* argv0, const char* flag, const char* s) {
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 1 || v > 4096) {
    std::fprintf(stderr, "%s: %s wants an integer in 1..4096, got '%s'\n",
                 argv0, flag, s);
    std::exit(2);
  }
  return static_cast<int>(v);
}

// The value after flag argv[*i] (*i moves to it), or exit 2 saying it
// needs one.
inline const char* FlagValue(int argc, char** argv, int* i) {
  if (*i + 1 >= argc) {
    std::fprintf(stderr, "%s: %s needs a value\n", argv[0], argv[*i]);
    std::exit(2);
  }
  return argv[++*i];
}

// The flags every such server takes.
struct ServerFlags {
  std::string listen;  // --listen ADDR
  int threads;         // --threads N: completion queues, one thread each
  int outstanding;     // --outstanding N: requested calls per method per queue
};

// Takes argv[*i] (and its value) into f when it is one of ServerFlags';
// false when it is not.
inline bool ParseServerFlag(int argc, char** argv, int* i, ServerFlags* f) {
  const std::string a = argv[*i];
  if (a == "--listen") {
    f->listen = FlagValue(argc, argv, i);
  } else if (a == "--threads") {
    f->threads = ParsePositive(argv[0], "--threads", FlagValue(argc, argv, i));
  } else if (a == "--outstanding") {
    f->outstanding = ParsePositive(argv[0], "--outstanding", FlagValue(argc, argv, i));
  } else {
    return false;
  }
  return true;
}

// Parses argv: ServerFlags' flags, then any other through
// extra(flag, &i) (true when it took it, its value by FlagValue); -h or
// --help prints usage (a printf format taking argv[0]) and exits 0,
// anything else prints it to stderr and exits 2.
template <class Extra>
void ParseFlags(int argc, char** argv, ServerFlags* f, const char* usage, Extra extra) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (ParseServerFlag(argc, argv, &i, f) || extra(a, &i)) continue;
    const bool help = a == "-h" || a == "--help";
    if (!help) std::fprintf(stderr, "%s: unknown argument '%s'\n", argv[0], a.c_str());
    std::fprintf(help ? stdout : stderr, usage, argv[0]);
    std::exit(help ? 0 : 2);
  }
}

// Blocks the stop signals; call before gRPC starts any thread, so every
// thread inherits the mask and only ServeUntilStopped's sigwait() gets them.
inline sigset_t BlockStopSignals() {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  return stop;
}

// A server of service on listen (a port in use fails, never shared), one
// completion queue per worker; exits 1 saying so when it cannot listen.
inline std::unique_ptr<grpc::Server> StartServer(grpc::Service* service,
                                                 const std::string& listen,
                                                 std::vector<Worker>& workers,
                                                 const char* argv0) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(service);
  for (auto& w : workers) w.cq = builder.AddCompletionQueue();
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "%s: cannot listen on %s\n", argv0, listen.c_str());
    std::exit(1);
  }
  return server;
}

// Serves every worker's queue on a thread of its own until a stop signal,
// then shuts the server down and drains the queues. name prefixes the log.
inline void ServeUntilStopped(grpc::Server* server, std::vector<Worker>& workers,
                              const sigset_t& stop, const char* name) {
  std::vector<std::thread> pool;
  pool.reserve(workers.size());
  for (auto& w : workers) pool.emplace_back(Serve, &w);
  int sig = 0;
  sigwait(&stop, &sig);
  std::fprintf(stderr, "%s: %s, shutting down\n", name, strsignal(sig));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  // Every call is now finished or failed; let each thread close its queue.
  std::vector<DrainTag> drains;
  drains.reserve(workers.size());
  std::vector<grpc::Alarm> alarms(workers.size());
  for (size_t i = 0; i < workers.size(); ++i) {
    drains.emplace_back(&workers[i]);
    alarms[i].Set(workers[i].cq.get(), gpr_now(GPR_CLOCK_MONOTONIC), &drains[i]);
  }
  for (auto& t : pool) t.join();
}

}  // namespace bench

#endif
