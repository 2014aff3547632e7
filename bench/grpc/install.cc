// The table installer: one Plan call that installs a table of the load's
// own owner ids, so a routes-on load looks every owner up in a table.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cmath>

#include "cacheroute/v1/cacheroute.grpc.pb.h"
#include "loadgen.h"

namespace loadgen {

bool InstallTable(const Options& o, std::string* err) {
  namespace pb = cacheroute::v1;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  auto stub = pb::CacheRoute::NewStub(
      grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(), args));
  pb::PlanRequest req;
  // Enough warm slots for every session, and qcap above the rate, so each
  // is admitted with one shard: the table holds all of them.
  auto* cfg = req.mutable_config();
  cfg->set_n_shards(o.install_shards);
  cfg->set_qcap(o.install_rate * 2);
  cfg->set_warm_slots_per_shard(std::ceil(static_cast<double>(o.install) / o.install_shards) + 1);
  req.mutable_rates()->Reserve(static_cast<int>(o.install));
  for (uint64_t i = 0; i < o.install; ++i) {
    auto* r = req.add_rates();
    r->set_owner(OwnerId(i));
    r->set_rate(o.install_rate);
  }
  req.set_install(true);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  pb::PlanResponse resp;
  grpc::Status st = stub->Plan(&ctx, req, &resp);
  if (!st.ok()) {
    *err = "Plan: status " + std::to_string(st.error_code()) + ": " + st.error_message();
    return false;
  }
  if (static_cast<uint64_t>(resp.table().placements_size()) != o.install ||
      resp.table().generation() == 0) {
    *err = "Plan installed generation " + std::to_string(resp.table().generation()) +
           " with " + std::to_string(resp.table().placements_size()) + " placements, want " +
           std::to_string(o.install);
    return false;
  }
  return true;
}

}  // namespace loadgen
