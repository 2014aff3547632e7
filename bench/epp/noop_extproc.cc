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
// Layout as bench/grpc/ceiling_server.cc (bench/grpc/async_server.h): the C++ completion-queue async
// API, one ServerCompletionQueue and one thread per --threads (default 1:
// the comparison is per core), --outstanding requested streams per queue;
// a stream object is reused once finished. Stops on SIGTERM or SIGINT.

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

#include "async_server.h"
#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"

namespace {

namespace pb = envoy::service::ext_proc::v3;
namespace core = envoy::config::core::v3;
using Service = pb::ExternalProcessor::AsyncService;

constexpr size_t kChunkBytes = 62000;  // a streamed body chunk, at most
constexpr const char* kDestinationHeader = "x-gateway-destination-endpoint";

using bench::Worker;

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

// One Process stream slot (bench::DuplexSlot): the answers wait in a
// queue, the front one being written.
class ProcessStream final
    : public bench::DuplexSlot<ProcessStream, pb::ProcessingRequest, pb::ProcessingResponse> {
 public:
  ProcessStream(Service* service, Worker* worker, const pb::ProcessingResponse* dest)
      : DuplexSlot(worker), service_(service), dest_(dest) {
    Arm();
  }

  void RequestCall(grpc::ServerContext* ctx,
                   grpc::ServerAsyncReaderWriter<pb::ProcessingResponse, pb::ProcessingRequest>* s,
                   void* tag) {
    service_->RequestProcess(ctx, s, cq(), cq(), tag);
  }
  size_t Handle(pb::ProcessingRequest& req) {
    size_t before = out_.size();
    Take(req);
    return out_.size() - before;
  }
  const pb::ProcessingResponse& Front() const { return out_.front(); }
  void Pop() { out_.pop_front(); }
  void Reset() {
    held_ = false;
    body_.clear();
    out_.clear();
  }

 private:
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

  void Take(pb::ProcessingRequest& req) {
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

  Service* service_;
  const pb::ProcessingResponse* dest_;
  bool held_ = false;      // request headers not yet answered
  std::string body_;       // the request body so far (keeps its capacity)
  std::deque<pb::ProcessingResponse> out_;  // answers not yet written, front in flight
};

constexpr const char* kUsage =
    "usage: %s [--listen ADDR] [--threads N] [--outstanding N] [--destination IP:PORT]\n"
    "  --listen ADDR          address to serve (default 127.0.0.1:9002)\n"
    "  --threads N            completion queues, one thread each (default 1)\n"
    "  --outstanding N        requested streams kept per queue (default 256)\n"
    "  --destination IP:PORT  the fixed destination (default 10.0.0.1:8000)\n";

}  // namespace

int main(int argc, char** argv) {
  bench::ServerFlags flags{"127.0.0.1:9002", 1, 256};
  std::string destination = "10.0.0.1:8000";

  bench::ParseFlags(argc, argv, &flags, kUsage, [&](const std::string& a, int* i) {
    if (a != "--destination") return false;
    destination = bench::FlagValue(argc, argv, i);
    return true;
  });

  const sigset_t stop = bench::BlockStopSignals();  // before gRPC's threads
  const pb::ProcessingResponse dest = MakeDestinationAnswer(destination);
  Service service;
  std::vector<Worker> workers(flags.threads);
  std::unique_ptr<grpc::Server> server =
      bench::StartServer(&service, flags.listen, workers, argv[0]);
  for (auto& w : workers)
    for (int i = 0; i < flags.outstanding; ++i) new ProcessStream(&service, &w, &dest);
  std::fprintf(stderr, "noop_extproc: listening on %s (%d threads)\n", flags.listen.c_str(),
               flags.threads);
  bench::ServeUntilStopped(server.get(), workers, stop, "noop_extproc");
  return 0;
}
