// A no-op Envoy external processor (ext_proc v3) for the endpoint picker's
// benchmark (bench/epp_bench.sh): the yardstick cacheroute's EPP is
// measured against, doing what any full-duplex picker must do and nothing
// else.
//
// Each Process stream is served as GIE's protocol wants in
// FULL_DUPLEX_STREAMED mode: the request headers are held until the request
// body's end_of_stream; then the headers are answered with a HeadersResponse
// that sets x-gateway-destination-endpoint to a fixed --destination (and the
// same value under dynamic_metadata["envoy.lb"]), with clear_route_cache;
// then the gathered body goes back as streamed_response chunks of at most
// 62,000 bytes (llm-d's size), the last with end_of_stream. Response
// headers, body chunks and trailers are echoed at once, in order. No JSON
// is read and no route is chosen: that is the difference the benchmark
// measures.
//
// Layout as bench/grpc/ceiling_server.cc: the C++ completion-queue async
// API, one ServerCompletionQueue and one thread per --threads (default 1:
// the comparison is per core), --outstanding requested streams per queue;
// a stream object is reused once finished. Stops on SIGTERM or SIGINT.

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"

namespace {

namespace pb = envoy::service::ext_proc::v3;
namespace core = envoy::config::core::v3;
using Service = pb::ExternalProcessor::AsyncService;

constexpr size_t kChunkBytes = 62000;  // a streamed body chunk, at most
constexpr const char* kDestinationHeader = "x-gateway-destination-endpoint";

class Tag {
 public:
  virtual ~Tag() = default;
  virtual void Proceed(bool ok) = 0;
};

struct Worker {
  std::unique_ptr<grpc::ServerCompletionQueue> cq;
  bool draining = false;
};

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

// The headers answer, the same for every request (copied into each).
pb::ProcessingResponse MakeDestinationAnswer(const std::string& destination) {
  pb::ProcessingResponse r;
  pb::CommonResponse* c = r.mutable_request_headers()->mutable_response();
  c->set_clear_route_cache(true);
  core::HeaderValueOption* o = c->mutable_header_mutation()->add_set_headers();
  o->mutable_header()->set_key(kDestinationHeader);
  o->mutable_header()->set_raw_value(destination);
  o->set_append_action(core::HeaderValueOption::OVERWRITE_IF_EXISTS_OR_ADD);
  google::protobuf::Struct lb;
  (*lb.mutable_fields())[kDestinationHeader].set_string_value(destination);
  (*r.mutable_dynamic_metadata()->mutable_fields())["envoy.lb"]
      .mutable_struct_value()
      ->Swap(&lb);
  return r;
}

// One Process stream slot. Reads and writes complete on their own tags (one
// of each in flight, gRPC's rule); answers wait in a queue, and past
// kMaxPending of them the slot stops reading, so HTTP/2 flow control
// pushes back on the client.
class ProcessStream final : public Tag {
 public:
  ProcessStream(Service* service, Worker* worker, const pb::ProcessingResponse* dest)
      : service_(service), worker_(worker), dest_(dest), read_(this), write_(this) {
    Arm();
  }

  void Proceed(bool ok) override {
    if (state_ == kRequested) {
      if (!ok) {  // the server is shutting down
        delete this;
        return;
      }
      state_ = kOpen;
      Read();
      return;
    }
    if (worker_->draining) {  // Finish completed
      delete this;
      return;
    }
    Arm();
  }

 private:
  static constexpr size_t kMaxPending = 64;
  enum State { kRequested, kOpen, kFinishing };

  class Op final : public Tag {
   public:
    explicit Op(ProcessStream* s) : s_(s) {}
    void Proceed(bool ok) override { this == &s_->read_ ? s_->ReadDone(ok) : s_->WriteDone(ok); }

   private:
    ProcessStream* s_;
  };

  void Arm() {
    state_ = kRequested;
    reading_ = writing_ = read_closed_ = false;
    held_ = false;
    body_.clear();
    out_.clear();
    stream_.reset();
    ctx_.emplace();
    stream_.emplace(&*ctx_);
    service_->RequestProcess(&*ctx_, &*stream_, worker_->cq.get(), worker_->cq.get(), this);
  }

  void Read() {
    reading_ = true;
    stream_->Read(&request_, &read_);
  }

  void Write() {
    writing_ = true;
    stream_->Write(out_.front(), &write_);
  }

  // Body bytes back as streamed_response chunks of at most kChunkBytes, into
  // the request_body or response_body answer; an empty end still sends one.
  void Echo(const std::string& body, bool end, bool request) {
    size_t off = 0;
    do {
      size_t n = std::min(kChunkBytes, body.size() - off);
      pb::ProcessingResponse& r = out_.emplace_back();
      pb::BodyResponse* b = request ? r.mutable_request_body() : r.mutable_response_body();
      pb::StreamedBodyResponse* s =
          b->mutable_response()->mutable_body_mutation()->mutable_streamed_response();
      s->set_body(body.data() + off, n);
      off += n;
      s->set_end_of_stream(end && off == body.size());
    } while (off < body.size());
  }

  // The request is complete: the held headers get the destination, then the
  // body goes back.
  void Decide(bool with_body) {
    if (held_) out_.push_back(*dest_);
    held_ = false;
    if (with_body) Echo(body_, true, true);
    body_.clear();
  }

  void Handle(pb::ProcessingRequest& req) {
    switch (req.request_case()) {
      case pb::ProcessingRequest::kRequestHeaders:
        held_ = true;
        if (req.request_headers().end_of_stream()) Decide(false);
        break;
      case pb::ProcessingRequest::kRequestBody:
        body_.append(req.request_body().body());
        if (req.request_body().end_of_stream()) Decide(true);
        break;
      case pb::ProcessingRequest::kRequestTrailers:
        Decide(true);
        out_.emplace_back().mutable_request_trailers();
        break;
      case pb::ProcessingRequest::kResponseHeaders:
        out_.emplace_back().mutable_response_headers();
        break;
      case pb::ProcessingRequest::kResponseBody:
        Echo(req.response_body().body(), req.response_body().end_of_stream(), false);
        break;
      case pb::ProcessingRequest::kResponseTrailers:
        out_.emplace_back().mutable_response_trailers();
        break;
      default:
        break;
    }
  }

  void ReadDone(bool ok) {
    reading_ = false;
    if (!ok) {  // the client half-closed, or the call is gone
      read_closed_ = true;
      MaybeFinish();
      return;
    }
    Handle(request_);
    if (!writing_ && !out_.empty()) Write();
    if (out_.size() < kMaxPending) Read();
  }

  void WriteDone(bool ok) {
    writing_ = false;
    if (!ok) {  // the call is gone: stop answering, let the read fail too
      out_.clear();
      ctx_->TryCancel();
    } else {
      out_.pop_front();
    }
    if (!out_.empty()) Write();
    if (!read_closed_ && !reading_ && out_.size() < kMaxPending) Read();
    MaybeFinish();
  }

  void MaybeFinish() {
    if (state_ != kOpen || !read_closed_ || reading_ || writing_ || !out_.empty()) return;
    state_ = kFinishing;
    stream_->Finish(grpc::Status::OK, this);
  }

  Service* service_;
  Worker* worker_;
  const pb::ProcessingResponse* dest_;
  Op read_;
  Op write_;
  State state_ = kRequested;
  bool reading_ = false;
  bool writing_ = false;
  bool read_closed_ = false;
  bool held_ = false;      // request headers not yet answered
  std::string body_;       // the request body so far (keeps its capacity)
  std::deque<pb::ProcessingResponse> out_;  // answers not yet written, front in flight
  std::optional<grpc::ServerContext> ctx_;
  std::optional<grpc::ServerAsyncReaderWriter<pb::ProcessingResponse, pb::ProcessingRequest>>
      stream_;
  pb::ProcessingRequest request_;
};

void Serve(Worker* w) {
  void* tag;
  bool ok;
  while (w->cq->Next(&tag, &ok)) static_cast<Tag*>(tag)->Proceed(ok);
}

[[noreturn]] void Usage(const char* argv0, int rc) {
  std::fprintf(rc ? stderr : stdout,
               "usage: %s [--listen ADDR] [--threads N] [--outstanding N] [--destination IP:PORT]\n"
               "  --listen ADDR          address to serve (default 127.0.0.1:9002)\n"
               "  --threads N            completion queues, one thread each (default 1)\n"
               "  --outstanding N        requested streams kept per queue (default 256)\n"
               "  --destination IP:PORT  the fixed destination (default 10.0.0.1:8000)\n",
               argv0);
  std::exit(rc);
}

int ParsePositive(const char* argv0, const char* flag, const char* s) {
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 1 || v > 4096) {
    std::fprintf(stderr, "%s: %s wants an integer in 1..4096, got '%s'\n", argv0, flag, s);
    std::exit(2);
  }
  return static_cast<int>(v);
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:9002";
  std::string destination = "10.0.0.1:8000";
  int threads = 1;
  int outstanding = 256;

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
    } else if (a == "--destination") {
      destination = value();
    } else if (a == "-h" || a == "--help") {
      Usage(argv[0], 0);
    } else {
      std::fprintf(stderr, "%s: unknown argument '%s'\n", argv[0], a.c_str());
      Usage(argv[0], 2);
    }
  }

  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  const pb::ProcessingResponse dest = MakeDestinationAnswer(destination);
  Service service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(&service);
  std::vector<Worker> workers(threads);
  for (auto& w : workers) w.cq = builder.AddCompletionQueue();
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "%s: cannot listen on %s\n", argv[0], listen.c_str());
    return 1;
  }
  for (auto& w : workers)
    for (int i = 0; i < outstanding; ++i) new ProcessStream(&service, &w, &dest);
  std::vector<std::thread> pool;
  pool.reserve(workers.size());
  for (auto& w : workers) pool.emplace_back(Serve, &w);
  std::fprintf(stderr, "noop_extproc: listening on %s (%d threads)\n", listen.c_str(), threads);

  int sig = 0;
  sigwait(&stop, &sig);
  std::fprintf(stderr, "noop_extproc: %s, shutting down\n", strsignal(sig));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  std::vector<DrainTag> drains;
  drains.reserve(workers.size());
  std::vector<grpc::Alarm> alarms(workers.size());
  for (size_t i = 0; i < workers.size(); ++i) {
    drains.emplace_back(&workers[i]);
    alarms[i].Set(workers[i].cq.get(), gpr_now(GPR_CLOCK_MONOTONIC), &drains[i]);
  }
  for (auto& t : pool) t.join();
  return 0;
}
