#!/bin/sh
# Writes the fuzz targets' seed corpora, tests/fuzz/corpus/<target>/<name>,
# from the protobuf text below (protoc --encode) and from a few lines of the
# Mooncake traces. The output is committed (small binary files, so a
# checkout fuzzes and runs fuzz_corpus_* without protoc); rerun this after
# changing a seed here and commit the result. Each target gets valid
# requests of each shape and a few edge cases; the state they meet is
# tests/fuzz/env.c's (owners 1..16, a plan installed, decisions r0..r3).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$here/corpus
grpc_proto=/usr/share/grpc-proto
traces=${CR_TRACES:-/work/shared/traces} # the Mooncake traces (replay/README.md)

# seed TARGET NAME MESSAGE PROTO INCLUDE: the text on stdin, encoded.
seed() {
    mkdir -p "$out/$1"
    protoc --encode="$3" -I "$5" "$5/$4" >"$out/$1/$2"
}
cr() { seed "$1" "$2" "cacheroute.v1.$3" cacheroute/v1/cacheroute.proto "$root/proto"; }

# state/'s seeds are state files, not protobuf text: kept as committed.
find "$out" -mindepth 1 -maxdepth 1 ! -name state -exec rm -rf {} +

cr plan rates PlanRequest <<'EOF'
rates { owner: 1 rate: 10 } rates { owner: 2 rate: 80 }
config { n_shards: 4 qcap: 50 warm_slots_per_shard: 200 }
EOF
cr plan estimator_install PlanRequest <<'EOF'
from_estimator: true install: true
EOF
cr plan partial_config PlanRequest <<'EOF'
rates { owner: 7 rate: 1e6 } rates { owner: -3 rate: 0 } config { qcap: 0.5 } install: true
EOF
cr plan both_sources PlanRequest <<'EOF'
rates { owner: 1 rate: 1 } from_estimator: true
EOF
cr plan bad_rate PlanRequest <<'EOF'
rates { owner: 1 rate: -1 } rates { owner: 1 rate: nan }
EOF
cr plan empty PlanRequest </dev/null

cr record_arrival routes RecordArrivalRequest <<'EOF'
owners: [7, 7, 42, 1, -9223372036854775808]
EOF
cr record_arrival weights RecordArrivalRequest <<'EOF'
owners: [1, 2, 3] weights: [2000, 0.5, 1e9]
EOF
cr record_arrival omit RecordArrivalRequest <<'EOF'
owners: [5, 6, 7, 8] omit_routes: true
EOF
cr record_arrival bad_weights RecordArrivalRequest <<'EOF'
owners: [1, 2] weights: [1]
EOF
cr record_arrival empty RecordArrivalRequest </dev/null

cr route hashes RouteRequest <<'EOF'
requests { owner: 3 prompt_tokens: 100 block_hashes: [11, 12, 13, 14] request_id: "q1" }
requests { block_hashes: [11, 12, 99] namespace: "m" }
requests { owner: 99 prompt_tokens: 5000 }
EOF
cr route many RouteRequest <<'EOF'
requests { owner: 1 block_hashes: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70] }
requests { owner: 2 block_hashes: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80] }
EOF
cr route bad RouteRequest <<'EOF'
requests { prompt_tokens: 20000000 } requests { namespace: "" request_id: "" }
EOF
cr route empty RouteRequest </dev/null
cr route objectives RouteRequest <<'EOF'
requests { owner: 4 block_hashes: [11, 12] objective: "batch" priority: -1 ttft_slo_ms: 0.5 fairness_id: "t1" }
requests { block_hashes: [11, 12] objective: "interactive" ttft_slo_ms: 2000 fairness_id: "t2" }
requests { block_hashes: [13] priority: 3 }
EOF
cr route bad_objective RouteRequest <<'EOF'
requests { objective: "batch" } requests { ttft_slo_ms: -1 priority: 1001 fairness_id: "0123456789012345678901234567890123456789012345678901234567890123" }
EOF

cr report_kv_events stored ReportKvEventsRequest <<'EOF'
events { shard: 2 block_stored { block_hashes: [101, 102] token_ids: [1, 2, 3, 4, 5, 6, 7, 8] block_size: 4 lora_name: "a" } }
events { shard: 2 block_stored { block_hashes: [103] parent_block_hash: 102 token_ids: [9, 10, 11, 12] block_size: 4 lora_name: "a" } }
events { shard: 5 block_stored { block_hashes: [18446744073709551615] token_ids: [7] block_size: 1 } }
EOF
cr report_kv_events removed ReportKvEventsRequest <<'EOF'
events { shard: 1 block_stored { block_hashes: [1, 2, 3] token_ids: [1, 2, 3] block_size: 1 } }
events { shard: 1 block_removed { block_hashes: [2, 9] } }
events { shard: 1 all_blocks_cleared { } } events { shard: 3 all_blocks_cleared { } }
EOF
cr report_kv_events bad ReportKvEventsRequest <<'EOF'
events { shard: 9 } events { shard: 0 block_stored { block_hashes: [1] token_ids: [1, 2] block_size: 4 } }
EOF
cr report_kv_events empty ReportKvEventsRequest </dev/null

cr select_injection kv SelectInjectionRequest <<'EOF'
request_id: "r9" prompt_tokens: 2000 knowledge_tokens: 8000
sources { name: "kvstore-a" cached_tokens: 8000 } sources { name: "kvstore-b" cached_tokens: 4000 }
EOF
cr select_injection dry_queue SelectInjectionRequest <<'EOF'
prompt_tokens: 100 knowledge_tokens: 50000 queue_wait_ms: 250 gpu: 0 dry_run: true
sources { name: "s" cached_tokens: 50000 }
EOF
cr select_injection replace SelectInjectionRequest <<'EOF'
request_id: "r0" prompt_tokens: 1 knowledge_tokens: 0
EOF
cr select_injection too_many_cached SelectInjectionRequest <<'EOF'
request_id: "bad" prompt_tokens: 10 knowledge_tokens: 10 sources { name: "a" cached_tokens: 11 }
EOF
cr select_injection empty SelectInjectionRequest </dev/null

cr get_rates listed GetRatesRequest <<'EOF'
owners: [1, 16, 17, -1]
EOF
cr get_rates all GetRatesRequest </dev/null
cr get_rates merged GetRatesRequest <<'EOF'
owners: [1] merged: true
EOF

cr forget some ForgetRequest <<'EOF'
owners: [1, 2, 2, 99]
EOF
cr forget none ForgetRequest </dev/null

cr get_node_profile empty GetNodeProfileRequest </dev/null

cr report_outcome matched ReportOutcomeRequest <<'EOF'
outcomes { request_id: "r0" owner: 1 shard: 0 prompt_tokens: 10000 cached_tokens: 6000
           queue_wait_ms: 5 prefill_ms: 300 prefilled_from: 6000 prefilled_to: 10000
           mode: INJECTION_MODE_KV_CACHE source: "kvstore-a" transfer_ms: 40
           transfer_bytes: 786432000 load_ms: 10 ttft_ms: 480 gpu: 0 }
outcomes { request_id: "r1" ttft_ms: 900 mode: INJECTION_MODE_TEXT }
EOF
cr report_outcome unmatched ReportOutcomeRequest <<'EOF'
outcomes { owner: 3 shard: 2 prompt_tokens: 100 cached_tokens: 50 }
outcomes { request_id: "nobody" prefill_ms: 12 prefilled_from: 0 prefilled_to: 100 }
EOF
cr report_outcome rejected ReportOutcomeRequest <<'EOF'
outcomes { request_id: "r2" prefill_ms: -1 }
EOF
cr report_outcome empty ReportOutcomeRequest </dev/null

cr get_decision found GetDecisionRequest <<'EOF'
request_id: "r3"
EOF
cr get_decision missing GetDecisionRequest <<'EOF'
request_id: "r-not-decided"
EOF
cr get_decision empty GetDecisionRequest </dev/null

cr get_stats empty GetStatsRequest </dev/null

cr watch_decisions empty WatchDecisionsRequest </dev/null

seed health_check all grpc.health.v1.HealthCheckRequest grpc/health/v1/health.proto \
    "$grpc_proto" </dev/null
seed health_check cacheroute grpc.health.v1.HealthCheckRequest \
    grpc/health/v1/health.proto "$grpc_proto" <<'EOF'
service: "cacheroute.v1.CacheRoute"
EOF
seed health_check unknown grpc.health.v1.HealthCheckRequest \
    grpc/health/v1/health.proto "$grpc_proto" <<'EOF'
service: "grpc.health.v1.Health"
EOF

refl() {
    seed reflection "$1" grpc.reflection.v1.ServerReflectionRequest \
        grpc/reflection/v1/reflection.proto "$grpc_proto"
}
refl list <<'EOF'
host: "localhost" list_services: ""
EOF
refl file <<'EOF'
file_by_filename: "cacheroute/v1/cacheroute.proto"
EOF
refl symbol <<'EOF'
file_containing_symbol: "cacheroute.v1.CacheRoute.Plan"
EOF
refl nested_symbol <<'EOF'
file_containing_symbol: ".grpc.health.v1.HealthCheckResponse.ServingStatus"
EOF
refl extension <<'EOF'
file_containing_extension { containing_type: "cacheroute.v1.PlanRequest" extension_number: 5 }
EOF
refl extension_numbers <<'EOF'
all_extension_numbers_of_type: "cacheroute.v1.Outcome"
EOF
refl unknown_file <<'EOF'
file_by_filename: "nothing.proto"
EOF
refl empty </dev/null

# Traces: a few lines of each Mooncake trace, and edge cases by hand.
mkdir -p "$out/trace"
head -n 4 "$traces/mooncake_conversation_trace.jsonl" >"$out/trace/conversation"
head -n 3 "$traces/mooncake_synthetic_trace.jsonl" >"$out/trace/synthetic"
printf '%s\n\n%s' '{"timestamp": 5.5, "input_length": 1, "output_length": 0, "hash_ids": [3]}' \
    '{"timestamp": 1, "input_length": 600, "output_length": 2, "hash_ids": [3, 9007199254740991], "x": null}' \
    >"$out/trace/unsorted_blank_no_newline"
printf '%s\n' '{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": [1]}' \
    >"$out/trace/bad_length"
printf '%s\n' '{"timestamp": 0, "timestamp": 1, "input_length": 5, "hash_ids": []}' \
    >"$out/trace/duplicate_key"
printf '[1, 2]\n' >"$out/trace/not_object"

# Raw bytes: an unknown field (valid: proto3 keeps going) and a truncated one.
printf '\010\001' >"$out/watch_decisions/unknown_field"
printf '\012\005ab' >"$out/watch_decisions/truncated"

# KV-event payloads (msgpack, written as hex): vLLM's older array-like
# encoding with int hashes (negative int64 among them), its current
# map-like one with bytes hashes, a lora_name, fields past the known and a
# CPU-tier event, and one refused (1 token for a block of 2).
hex() { # the bytes the hex digits spell
    for b in $(printf '%s' "$1" | sed 's/../& /g'); do printf "\\$(printf %03o "0x$b")"; done
}
mkdir -p "$out/kv_decode"
# [1.5, [["BlockStored", [1, -2], nil, [1, 2, 3, 4], 2, nil, "GPU", nil],
#        ["BlockStored", [3], -2, [5, 6], 2, 7, nil, nil], ["BlockRemoved", [1], "GPU"],
#        ["AllBlocksCleared"]], 0]
hex 93cb3ff80000000000009498ab426c6f636b53746f7265649201fec0940102030402c0a3475055c098ab426c\
6f636b53746f7265649103fe9205060207c0c093ac426c6f636b52656d6f7665649101a347505591b0416c6c426c6f\
636b73436c656172656400 >"$out/kv_decode/array_like"
# {"ts": 2.0, "events": [{"type": "BlockStored", "block_hashes": [bin 16, bin 16],
#  "parent_block_hash": nil, "token_ids": [1, 2, 3, 70000], "block_size": 2, "lora_id": nil,
#  "medium": "GPU", "lora_name": "a", "group_idx": 0, "extra_keys": [nil, nil]},
#  {"type": "BlockRemoved", "block_hashes": [bin 16], "medium": "CPU"}],
#  "data_parallel_rank": nil}
hex 83a27473cb4000000000000000a66576656e7473928aa474797065ab426c6f636b53746f726564ac626c6f63\
6b5f68617368657392c41030313233343536373839616263646566c41066656463626139383736353433323130b170\
6172656e745f626c6f636b5f68617368c0a9746f6b656e5f69647394010203ce00011170aa626c6f636b5f73697a65\
02a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65a161a967726f75705f69647800aa6578\
7472615f6b65797392c0c083a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391c41030\
313233343536373839616263646566a66d656469756da3435055b2646174615f706172616c6c656c5f72616e6bc0 \
    >"$out/kv_decode/map_like"
# [1, [["BlockStored", [1], nil, [1], 2]], 0]
hex 93019195ab426c6f636b53746f7265649101c091010200 >"$out/kv_decode/bad_tokens"

# Endpoints files (--endpoints-file): JSON and YAML forms, a weight left
# out, the longest names, and refusals (a duplicate id, an unknown key,
# two "endpoints" keys, not a list, and the rest below).
mkdir -p "$out/endpoints_file"
printf '%s\n' '{"endpoints": [{"id": "vllm-0", "address": "10.0.0.5:8000", "weight": 1},' \
    ' {"id": "vllm-1", "address": "http://10.0.0.6:8000/v1"}]}' >"$out/endpoints_file/json"
printf 'endpoints:\n  - id: a\n    address: "h:1"\n    weight: 2.5\n  - {id: b, address: h2}\n' \
    >"$out/endpoints_file/yaml"
printf 'endpoints:\n  - id: %s\n    address: %s\n' "$(printf 'i%.0s' $(seq 128))" \
    "$(printf 'a%.0s' $(seq 256))" >"$out/endpoints_file/longest"
printf 'endpoints:\n  - id: a\n    address: x\n  - id: a\n    address: y\n' \
    >"$out/endpoints_file/duplicate"
printf '{"endpoints": [{"id": "a", "address": "x", "port": 1}]}' >"$out/endpoints_file/unknown_key"
printf 'endpoints: []\nendpoints: [{id: a, address: b}]\n' >"$out/endpoints_file/twice"
printf 'endpoints: {id: a}\n' >"$out/endpoints_file/not_a_list"
# issue 30's: a NUL in an id, a second document, nesting past the bound
printf 'endpoints:\n  - {id: "a\\0b", address: h}\n  - {id: "a\\0c", address: h}\n' \
    >"$out/endpoints_file/nul_id"
printf 'endpoints: [{id: a, address: h}]\n---\nendpoints: [{id: b, address: h}]\n' \
    >"$out/endpoints_file/two_documents"
printf 'endpoints: [{id: a, address: %s1%s}]\n' "$(printf '[%.0s' $(seq 20))" \
    "$(printf ']%.0s' $(seq 20))" >"$out/endpoints_file/deep"

# The endpoint picker's streams (fuzz_epp_stream.c): a flags byte (bit 0
# BUFFERED, bit 1 a 4 KiB body bound, bit 2 closed broken), then each
# ProcessingRequest as a 2-byte little-endian length and its bytes. The
# messages are the protobuf text on stdin, one per paragraph.
mkdir -p "$out/epp_stream"
epp_msg() { # the text on stdin as one length-prefixed ProcessingRequest
    protoc --encode=envoy.service.ext_proc.v3.ProcessingRequest -I "$root/proto" \
        -I /usr/include envoy/service/ext_proc/v3/external_processor.proto >"$out/.msg"
    n=$(wc -c <"$out/.msg")
    printf "\\$(printf %o $((n & 255)))\\$(printf %o $((n >> 8)))"
    cat "$out/.msg"
}
epp() { # NAME FLAGS, the paragraphs on stdin
    printf "\\$(printf %o "$2")" >"$out/epp_stream/$1"
    awk -v RS= -v dir="$out" '{ f = sprintf("%s/.para%03d", dir, NR); print > f; close(f) }'
    for p in "$out"/.para*; do epp_msg <"$p" >>"$out/epp_stream/$1"; rm -f "$p"; done
    rm -f "$out/.msg"
}
chat='{\"model\":\"llama\",\"messages\":[{\"role\":\"user\",\"content\":\"hello there\"}],\"stream\":true}'
post='request_headers { headers { headers { key: ":method" raw_value: "POST" }
  headers { key: ":path" raw_value: "/v1/chat/completions" }
  headers { key: "x-session-id" raw_value: "s1" } } }'
usage='data: {\"usage\":{\"prompt_tokens\":9,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n'
respond="response_headers { headers { headers { key: \":status\" raw_value: \"200\" } } }
metadata_context { filter_metadata { key: \"envoy.lb\" value { fields {
  key: \"x-gateway-destination-endpoint-served\" value { string_value: \"10.0.0.2:8000\" } } } } }

response_body { body: \"data: {}\\n\\n\" }

response_body { body: \"$usage\" end_of_stream: true }

response_trailers { }"
epp full_duplex 0 <<EOF2
$post

request_body { body: "{\"model\":\"llama\",\"mess" }

request_body { body: "ages\":[{\"role\":\"user\",\"content\":\"hello there\"}]}" end_of_stream: true }

$respond
EOF2
epp buffered 1 <<EOF2
$post
protocol_config { request_body_mode: BUFFERED response_body_mode: BUFFERED }

request_body { body: "$chat" end_of_stream: true }

$respond
EOF2
epp get 0 <<EOF2
request_headers { headers { headers { key: ":method" value: "GET" }
  headers { key: ":path" value: "/v1/models" } } end_of_stream: true }

response_headers { headers { headers { key: ":status" raw_value: "200" } } end_of_stream: true }
EOF2
epp subset 0 <<EOF2
$post
metadata_context { filter_metadata { key: "envoy.lb.subset_hint" value { fields {
  key: "x-gateway-destination-endpoint-subset" value { list_value {
    values { string_value: "10.0.0.4:8000" } values { string_value: "10.9.9.9:1" } } } } } } }

request_body { body: "$chat" end_of_stream: true }
EOF2
epp subset_unknown 0 <<EOF2
$post
metadata_context { filter_metadata { key: "envoy.lb.subset_hint" value { fields {
  key: "x-gateway-destination-endpoint-subset" value { string_value: "10.9.9.9:1,10.9.9.8:1" } } } } }

request_body { body: "$chat" end_of_stream: true }
EOF2
epp too_large 2 <<EOF2
$post

request_body { body: "$(printf 'a%.0s' $(seq 3000))" }

request_body { body: "$(printf 'b%.0s' $(seq 3000))" end_of_stream: true }
EOF2
epp bad_json 0 <<EOF2
$post

request_body { body: "{\"model\":5,\"messages\":[]}" end_of_stream: true }
EOF2
epp not_utf8 0 <<EOF2
$post

request_body { body: "{\"model\":\"m\",\"prompt\":\"\\377\\376\"}" end_of_stream: true }
EOF2
epp broken_after_route 4 <<EOF2
$post

request_body { body: "$chat" end_of_stream: true }

response_headers { headers { headers { key: ":status" raw_value: "200" } } }
EOF2
epp upstream_5xx 0 <<EOF2
$post

request_body { body: "$chat" end_of_stream: true }

response_headers { headers { headers { key: ":status" raw_value: "503" } } end_of_stream: true }
EOF2
epp body_first 0 <<EOF2
request_body { body: "x" end_of_stream: true }
EOF2
epp completion_ids 0 <<EOF2
request_headers { headers { headers { key: ":method" raw_value: "POST" }
  headers { key: ":path" raw_value: "/v1/completions" } } }

request_body { body: "{\"model\":\"m\",\"prompt\":[1,2,3,4,5,6,7,8,9],\"cache_salt\":\"s\"}" end_of_stream: true }
EOF2
epp door_shed 0 <<EOF2
request_headers { headers { headers { key: ":method" raw_value: "POST" }
  headers { key: ":path" raw_value: "/v1/chat/completions" }
  headers { key: "x-gateway-inference-objective" raw_value: "batch" }
  headers { key: "x-gateway-inference-fairness-id" raw_value: "t1" } } }

request_body { body: "$chat" end_of_stream: true }
EOF2
epp door_critical 0 <<EOF2
request_headers { headers { headers { key: ":method" raw_value: "POST" }
  headers { key: ":path" raw_value: "/v1/chat/completions" }
  headers { key: "x-gateway-inference-objective" raw_value: "interactive" }
  headers { key: "x-llm-d-slo-ttft-ms" raw_value: "0.5" } } }

request_body { body: "$chat" end_of_stream: true }

$respond
EOF2
epp door_bad_slo 0 <<EOF2
request_headers { headers { headers { key: ":method" raw_value: "POST" }
  headers { key: ":path" raw_value: "/v1/chat/completions" }
  headers { key: "x-llm-d-slo-ttft-ms" raw_value: "-1" } } }
EOF2

# Engines' /metrics bodies (fuzz_scrape_parse.c): vLLM's (two data-parallel
# engines, cache_config_info, lora_requests_info, a histogram), SGLang's,
# escapes, NaN and Inf, CRLF, and refusals (HTML, a used count NaN, an
# unclosed label value).
mkdir -p "$out/scrape_parse"
printf '%s\n' '# HELP vllm:num_requests_running Number of requests in model execution batches.' \
    '# TYPE vllm:num_requests_running gauge' \
    'vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0' \
    'vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0' \
    '# TYPE vllm:num_requests_waiting gauge' \
    'vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0' \
    'vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.5' \
    'vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_cpu_blocks="None",num_gpu_blocks="27153"} 1.0' \
    'vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql-lora,chat",waiting_lora_adapters="tone"} 1.7331e+09' \
    'vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 12.0' \
    'vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} NaN' \
    >"$out/scrape_parse/vllm"
printf '%s\n' '# HELP sglang:num_running_reqs The number of running requests.' \
    '# TYPE sglang:num_running_reqs gauge' \
    'sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0' \
    'sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.28' \
    'sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0' \
    >"$out/scrape_parse/sglang"
printf 'other{path="C:\\\\dir",msg="say \\"hi\\"\\n"} +Inf\r\nx -Inf 1733000000000\nvllm:gpu_cache_usage_perc 0.7\r\nvllm:lora_requests_info { max_lora = "2" , running_lora_adapters="a\\\\b, c" ,} 5' \
    >"$out/scrape_parse/escapes"
printf '<html><body>Not Found</body></html>\n' >"$out/scrape_parse/html"
printf 'vllm:num_requests_waiting NaN\n' >"$out/scrape_parse/nan_count"
printf 'vllm:cache_config_info{block_size="16} 1\n' >"$out/scrape_parse/unclosed"
