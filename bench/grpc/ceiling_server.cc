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

#include "async_server.h"
#include "cacheroute/v1/cacheroute.grpc.pb.h"

namespace {

namespace pb = cacheroute::v1;
using Service = pb::CacheRoute::AsyncService;

using bench::Tag;
using bench::Worker;

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
// is answered with one empty response, in order (bench::DuplexSlot).
// kRequest is the generated Service::RequestXxx member, as for UnaryCall.
template <class Req, class Resp, auto kRequest>
class StreamCall final : public bench::DuplexSlot<StreamCall<Req, Resp, kRequest>, Req, Resp> {
 public:
  StreamCall(Service* service, Worker* worker)
      : bench::DuplexSlot<StreamCall, Req, Resp>(worker), service_(service) {
    this->Arm();
  }

  void RequestCall(grpc::ServerContext* ctx, grpc::ServerAsyncReaderWriter<Resp, Req>* stream,
                   void* tag) {
    (service_->*kRequest)(ctx, stream, this->cq(), this->cq(), tag);
  }
  size_t Handle(Req&) { return 1; }
  const Resp& Front() const { return response_; }
  void Pop() {}
  void Reset() {}

 private:
  Service* service_;
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

constexpr const char* kUsage =
    "usage: %s [--listen ADDR] [--threads N] [--outstanding N]\n"
    "  --listen ADDR      address to serve (default 127.0.0.1:50151)\n"
    "  --threads N        completion queues, one thread each\n"
    "                     (default: hardware concurrency)\n"
    "  --outstanding N    requested calls kept per method per queue\n"
    "                     (default 64)\n";

}  // namespace

int main(int argc, char** argv) {
  bench::ServerFlags flags{"127.0.0.1:50151",
                           static_cast<int>(std::thread::hardware_concurrency()), 64};
  if (flags.threads < 1) flags.threads = 1;

  bench::ParseFlags(argc, argv, &flags, kUsage, [](const std::string&, int*) { return false; });

  const sigset_t stop = bench::BlockStopSignals();  // before gRPC's threads

  Service service;
  std::vector<Worker> workers(flags.threads);
  std::unique_ptr<grpc::Server> server =
      bench::StartServer(&service, flags.listen, workers, argv[0]);

  for (auto& w : workers) {
    for (int i = 0; i < flags.outstanding; ++i) {
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
  std::fprintf(stderr, "ceiling_server: listening on %s (%d threads)\n",
               flags.listen.c_str(), flags.threads);
  bench::ServeUntilStopped(server.get(), workers, stop, "ceiling_server");
  return 0;
}
