/* The EPP's OpenAI body reader (epp/openai.h) and a prompt's block keys
 * (epp/keys.h): every field form, every refusal with its message, deep
 * nesting and non-UTF-8 refused before the parser, a 10 MB body, the keys
 * against a hand-built cr_route_block_hash chain, and usage from an SSE
 * tail or a JSON body. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "keys.h"
#include "openai.h"
#include "route.h"

static cr_status parse_str(cr_openai_kind kind, const char *body, cr_openai_request *r,
                           cr_error *err)
{
    return cr_openai_parse(kind, (const uint8_t *)body, strlen(body), r, err);
}

/* ---- kinds --------------------------------------------------------------- */

static cr_openai_kind kind(const char *method, const char *path)
{
    return cr_openai_kind_of(method, strlen(method), path, strlen(path));
}

static void test_kind_of(void)
{
    CU_ASSERT_EQUAL(kind("POST", "/v1/chat/completions"), CR_OPENAI_CHAT);
    CU_ASSERT_EQUAL(kind("POST", "/v1/completions"), CR_OPENAI_COMPLETION);
    CU_ASSERT_EQUAL(kind("POST", "/v1/completions?x=1"), CR_OPENAI_COMPLETION);
    CU_ASSERT_EQUAL(kind("GET", "/v1/chat/completions"), CR_OPENAI_OTHER);
    CU_ASSERT_EQUAL(kind("POST", "/v1/models"), CR_OPENAI_OTHER);
    CU_ASSERT_EQUAL(kind("POST", "/v1/chat/completions/"), CR_OPENAI_OTHER);
    CU_ASSERT_EQUAL(kind("POST", "/v1/chat"), CR_OPENAI_OTHER);
    CU_ASSERT_EQUAL(kind("POSTX", "/v1/completions"), CR_OPENAI_OTHER);
}

/* ---- fields -------------------------------------------------------------- */

static void test_chat_fields(void)
{
    const char *body =
        "{\"model\":\"llama\",\"user\":\"u-1\",\"cache_salt\":\"s\\u00e9\",\"stream\":true,"
        "\"max_tokens\":100,\"max_completion_tokens\":7,\"messages\":["
        "{\"role\":\"system\",\"content\":\"Be\\nbrief\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"caf\\u00e9 \"},"
        "{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}},{\"type\":\"text\",\"text\":\"日本\"}]},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[]}]}";
    cr_openai_request r;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(parse_str(CR_OPENAI_CHAT, body, &r, &err), CR_OK);
    CU_ASSERT_EQUAL(r.kind, CR_OPENAI_CHAT);
    CU_ASSERT_STRING_EQUAL(r.model, "llama");
    CU_ASSERT_EQUAL(r.model_len, 5);
    CU_ASSERT_STRING_EQUAL(r.user, "u-1");
    CU_ASSERT_STRING_EQUAL(r.cache_salt, "s\xc3\xa9");
    CU_ASSERT_EQUAL(r.cache_salt_len, 3);
    CU_ASSERT_EQUAL(r.stream, 1);
    CU_ASSERT_EQUAL(r.max_tokens, 7); /* max_completion_tokens wins */
    const char *want = "systemBe\nbriefusercaf\xc3\xa9 日本assistant";
    CU_ASSERT_EQUAL(r.text_len, strlen(want));
    CU_ASSERT_EQUAL(memcmp(r.text, want, strlen(want)), 0);
    CU_ASSERT_PTR_NULL(r.tokens);
    cr_openai_request_free(&r);
    CU_ASSERT_PTR_NULL(r.model);
    cr_openai_request_free(&r); /* an empty one is fine */

    /* the absent ones, and max_tokens alone */
    CU_ASSERT_EQUAL_FATAL(parse_str(CR_OPENAI_CHAT,
                                    "{\"model\":\"m\",\"max_tokens\":3,\"user\":null,\"stream\":false,"
                                    "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                                    &r, &err),
                          CR_OK);
    CU_ASSERT_STRING_EQUAL(r.user, "");
    CU_ASSERT_EQUAL(r.user_len, 0);
    CU_ASSERT_STRING_EQUAL(r.cache_salt, "");
    CU_ASSERT_EQUAL(r.stream, 0);
    CU_ASSERT_EQUAL(r.max_tokens, 3);
    CU_ASSERT_EQUAL(r.text_len, 6);
    cr_openai_request_free(&r);
    CU_ASSERT_EQUAL_FATAL(parse_str(CR_OPENAI_CHAT,
                                    "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\"}]}",
                                    &r, &err),
                          CR_OK);
    CU_ASSERT_EQUAL(r.max_tokens, -1);
    cr_openai_request_free(&r);
}

static void test_prompt_forms(void)
{
    cr_openai_request r;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(
        parse_str(CR_OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\\\"b\"}", &r, &err), CR_OK);
    CU_ASSERT_EQUAL(r.kind, CR_OPENAI_COMPLETION);
    CU_ASSERT_EQUAL(r.text_len, 3);
    CU_ASSERT_EQUAL(memcmp(r.text, "a\"b", 3), 0);
    cr_openai_request_free(&r);

    CU_ASSERT_EQUAL_FATAL(
        parse_str(CR_OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"ab\",\"\",\"cd\"]}", &r, &err),
        CR_OK);
    CU_ASSERT_EQUAL(r.text_len, 4);
    CU_ASSERT_EQUAL(memcmp(r.text, "abcd", 4), 0);
    CU_ASSERT_PTR_NULL(r.tokens);
    cr_openai_request_free(&r);

    CU_ASSERT_EQUAL_FATAL(parse_str(CR_OPENAI_COMPLETION,
                                    "{\"model\":\"m\",\"prompt\":[1,2,4294967295,0]}", &r, &err),
                          CR_OK);
    CU_ASSERT_EQUAL_FATAL(r.n_tokens, 4);
    CU_ASSERT_EQUAL(r.tokens[0], 1);
    CU_ASSERT_EQUAL(r.tokens[2], 4294967295u);
    CU_ASSERT_EQUAL(r.tokens[3], 0);
    CU_ASSERT_EQUAL(r.text_len, 0);
    cr_openai_request_free(&r);

    CU_ASSERT_EQUAL_FATAL(
        parse_str(CR_OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[[5,6,7],[8]]}", &r, &err),
        CR_OK);
    CU_ASSERT_EQUAL_FATAL(r.n_tokens, 3); /* the first list */
    CU_ASSERT_EQUAL(r.tokens[0], 5);
    CU_ASSERT_EQUAL(r.tokens[2], 7);
    cr_openai_request_free(&r);
}

/* ---- refusals ------------------------------------------------------------ */

static const struct {
    cr_openai_kind kind;
    const char *body, *msg;
} REFUSALS[] = {
    {CR_OPENAI_CHAT, "", "body is not JSON: it is empty"},
    /* cJSON points at the last byte of a body that ends too soon */
    {CR_OPENAI_CHAT, "{\"model\":", "body is not JSON: a syntax error at line 1 column 9"},
    {CR_OPENAI_CHAT, "{\n \"model\": tru}", "body is not JSON: a syntax error at line 2 column 11"},
    {CR_OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\"} x",
     "body is not JSON: more after the value at line 1 column 28"},
    {CR_OPENAI_CHAT, "[1]", "body must be a JSON object, got array"},
    {CR_OPENAI_CHAT, "{}", "model must be a non-empty string, got nothing"},
    {CR_OPENAI_CHAT, "{\"model\":5}", "model must be a non-empty string, got number"},
    {CR_OPENAI_CHAT, "{\"model\":\"\"}", "model must be a non-empty string, got an empty one"},
    {CR_OPENAI_CHAT, "{\"model\":\"m\",\"user\":5}", "user must be a string, got number"},
    {CR_OPENAI_CHAT, "{\"model\":\"m\",\"cache_salt\":[]}", "cache_salt must be a string, got array"},
    {CR_OPENAI_CHAT, "{\"model\":\"m\",\"stream\":\"yes\"}", "stream must be true or false, got string"},
    {CR_OPENAI_CHAT, "{\"model\":\"m\",\"max_tokens\":-5}",
     "max_tokens must be a non-negative integer, got -5"},
    {CR_OPENAI_CHAT, "{\"model\":\"m\",\"max_completion_tokens\":1.5}",
     "max_completion_tokens must be a non-negative integer, got 1.5"},
    {CR_OPENAI_CHAT, "{\"model\":\"m\",\"max_tokens\":\"10\"}",
     "max_tokens must be a non-negative integer, got string"},
    {CR_OPENAI_CHAT, "{\"model\":\"m\"}", "messages must be a non-empty array, got nothing"},
    {CR_OPENAI_CHAT, "{\"model\":\"m\",\"messages\":{}}", "messages must be a non-empty array, got object"},
    {CR_OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[]}",
     "messages must be a non-empty array, got an empty one"},
    {CR_OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[1]}", "messages[0] must be an object, got number"},
    {CR_OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"content\":\"x\"}]}",
     "messages[0].role must be a string, got nothing"},
    {CR_OPENAI_CHAT,
     "{\"model\":\"m\",\"messages\":[{\"role\":\"a\"},{\"role\":\"b\"},{\"role\":\"c\",\"content\":4}]}",
     "messages[2].content must be a string or an array of parts, got number"},
    {CR_OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"a\",\"content\":[\"x\"]}]}",
     "messages[0].content[0] must be an object, got string"},
    {CR_OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"a\",\"content\":[{\"text\":\"x\"}]}]}",
     "messages[0].content[0].type must be a string, got nothing"},
    {CR_OPENAI_CHAT,
     "{\"model\":\"m\",\"messages\":[{\"role\":\"a\",\"content\":[{\"type\":\"text\"},{\"type\":\"text\","
     "\"text\":true}]}]}",
     "messages[0].content[0].text must be a string, got nothing"},
    {CR_OPENAI_COMPLETION, "{\"model\":\"m\"}",
     "prompt must be a string, a list of strings or token ids, got nothing"},
    {CR_OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":5}",
     "prompt must be a string, a list of strings or token ids, got number"},
    {CR_OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[]}",
     "prompt must be a string, a list of strings or token ids, got an empty list"},
    {CR_OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[1,2,3,-1]}",
     "prompt[3] must be a token id in 0..4294967295, got -1"},
    {CR_OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[4294967296]}",
     "prompt[0] must be a token id in 0..4294967295, got 4294967296"},
    {CR_OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[1,\"a\"]}",
     "prompt[1] must be a token id in 0..4294967295, got string"},
    {CR_OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"a\",1]}", "prompt[1] must be a string, got number"},
    {CR_OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[[1],[2,2.5]]}",
     "prompt[1][1] must be a token id in 0..4294967295, got 2.5"},
    {CR_OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[[1],3]}",
     "prompt[1] must be a list of token ids, got number"},
    {CR_OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[{}]}",
     "prompt[0] must be a string, a list of strings or token ids, got object"},
    {CR_OPENAI_COMPLETION, "{\"model\":\"m\xff\",\"prompt\":\"x\"}", "body is not UTF-8 at byte 11"},
    {CR_OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"\xc0\xaf\"}", "body is not UTF-8 at byte 23"},
    {CR_OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"\xed\xa0\x80\"}", "body is not UTF-8 at byte 23"},
    {CR_OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"\xe6\x97\"}", "body is not UTF-8 at byte 23"},
    {CR_OPENAI_OTHER, "{}", "only chat and completion bodies are read, got kind 0"},
};

static void test_refusals(void)
{
    for (size_t i = 0; i < sizeof REFUSALS / sizeof REFUSALS[0]; i++) {
        cr_openai_request r;
        cr_error err = {{0}};
        cr_status st = parse_str(REFUSALS[i].kind, REFUSALS[i].body, &r, &err);
        CU_ASSERT_EQUAL(st, CR_EINVAL);
        CU_ASSERT_PTR_NULL(r.model);
        CU_ASSERT_PTR_NULL(r.tokens);
        if (strcmp(err.msg, REFUSALS[i].msg) != 0) {
            fprintf(stderr, "\nbody %s\n  got  \"%s\"\n  want \"%s\"\n", REFUSALS[i].body, err.msg,
                    REFUSALS[i].msg);
            CU_FAIL("wrong message");
        }
    }
}

static void test_too_many_messages(void)
{
    size_t n = CR_OPENAI_MAX_MESSAGES + 1, cap = 64 + n * 16;
    char *b = malloc(cap);
    size_t at = (size_t)sprintf(b, "{\"model\":\"m\",\"messages\":[");
    for (size_t i = 0; i < n; i++)
        at += (size_t)sprintf(b + at, "%s{\"role\":\"u\"}", i ? "," : "");
    strcpy(b + at, "]}");
    cr_openai_request r;
    cr_error err;
    CU_ASSERT_EQUAL(parse_str(CR_OPENAI_CHAT, b, &r, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "messages has 65537 entries, at most 65536");
    /* at the bound: read */
    memcpy(b + at - 13, "]}", 3);
    CU_ASSERT_EQUAL(parse_str(CR_OPENAI_CHAT, b, &r, &err), CR_OK);
    CU_ASSERT_EQUAL(r.text_len, CR_OPENAI_MAX_MESSAGES); /* "u" each */
    cr_openai_request_free(&r);
    free(b);
}

/* A completion body whose prompt holds brackets (which do not count) and
 * whose "x" is arrays nested that deep: the object makes one level more. */
static size_t nested(char *b, size_t arrays)
{
    size_t at = (size_t)sprintf(b, "{\"model\":\"m\",\"prompt\":\"[[[[[[[[\\\"[[[[\",\"x\":");
    memset(b + at, '[', arrays);
    memset(b + at + arrays, ']', arrays);
    at += 2 * arrays;
    b[at++] = '}';
    return at;
}

/* 100,000 '[' (and as many ']'), and alone: refused by the pass before
 * the parser, which would recurse. 64 levels are read, 65 are not. */
static void test_deep_nesting(void)
{
    size_t deep = 100000, len = 2 * deep;
    char *b = malloc(len + 64);
    memset(b, '[', deep);
    memset(b + deep, ']', deep);
    cr_openai_request r;
    cr_error err;
    CU_ASSERT_EQUAL(cr_openai_parse(CR_OPENAI_CHAT, (uint8_t *)b, len, &r, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "body nests deeper than 64");
    CU_ASSERT_EQUAL(cr_openai_parse(CR_OPENAI_CHAT, (uint8_t *)b, deep, &r, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "body nests deeper than 64");
    len = nested(b, CR_OPENAI_MAX_DEPTH - 1);
    CU_ASSERT_EQUAL(cr_openai_parse(CR_OPENAI_COMPLETION, (uint8_t *)b, len, &r, &err), CR_OK);
    cr_openai_request_free(&r);
    len = nested(b, CR_OPENAI_MAX_DEPTH);
    CU_ASSERT_EQUAL(cr_openai_parse(CR_OPENAI_COMPLETION, (uint8_t *)b, len, &r, &err), CR_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.msg, "body nests deeper than 64");
    free(b);
}

/* A 10 MB completion prompt of mixed text: read whole, unescaped. */
static void test_ten_megabytes(void)
{
    static const char chunk[] = "caf\xc3\xa9 \\n \xe6\x97\xa5 \\\"q\\\" \xf0\x9f\x99\x82 abc ";
    static const char plain[] = "caf\xc3\xa9 \n \xe6\x97\xa5 \"q\" \xf0\x9f\x99\x82 abc ";
    size_t reps = (10u << 20) / (sizeof chunk - 1), cap = 64 + reps * (sizeof chunk - 1);
    char *b = malloc(cap);
    size_t at = (size_t)sprintf(b, "{\"model\":\"m\",\"prompt\":\"");
    for (size_t i = 0; i < reps; i++, at += sizeof chunk - 1)
        memcpy(b + at, chunk, sizeof chunk - 1);
    at += (size_t)sprintf(b + at, "\"}");
    CU_ASSERT(at >= 10u << 20);
    cr_openai_request r;
    cr_error err;
    CU_ASSERT_EQUAL_FATAL(cr_openai_parse(CR_OPENAI_COMPLETION, (uint8_t *)b, at, &r, &err), CR_OK);
    CU_ASSERT_EQUAL(r.text_len, reps * (sizeof plain - 1));
    CU_ASSERT_EQUAL(memcmp(r.text + (reps - 1) * (sizeof plain - 1), plain, sizeof plain - 1), 0);
    cr_openai_request_free(&r);
    free(b);
}

/* ---- keys ---------------------------------------------------------------- */

/* text packed by hand: 4 bytes per token, little endian, zero padded */
static size_t pack(const uint8_t *text, size_t len, uint32_t *out)
{
    size_t n = (len + 3) / 4;
    for (size_t t = 0; t < n; t++) {
        uint32_t v = 0;
        for (size_t i = 0; i < 4; i++)
            if (4 * t + i < len)
                v |= (uint32_t)text[4 * t + i] << (8 * i);
        out[t] = v;
    }
    return n;
}

static void check_estimate(size_t len, uint32_t bt, size_t max)
{
    uint8_t text[512];
    uint32_t tokens[128];
    uint64_t keys[32], want[32];
    for (size_t i = 0; i < len; i++)
        text[i] = (uint8_t)(i * 37 + 11);
    size_t n = pack(text, len, tokens), blocks = n / bt < max ? n / bt : max;
    uint64_t parent = 0;
    for (size_t b = 0; b < blocks; b++)
        want[b] = parent = cr_route_block_hash(parent, tokens + b * bt, bt);
    uint32_t prompt = 0;
    size_t got = cr_epp_keys_estimate(text, len, bt, keys, max, &prompt);
    CU_ASSERT_EQUAL(prompt, n);
    CU_ASSERT_EQUAL_FATAL(got, blocks);
    CU_ASSERT_EQUAL(memcmp(keys, want, blocks * sizeof *keys), 0);
    CU_ASSERT_EQUAL(cr_epp_keys_tokens(tokens, n, bt, keys, max), blocks);
    CU_ASSERT_EQUAL(memcmp(keys, want, blocks * sizeof *keys), 0);
}

static void test_keys(void)
{
    check_estimate(4 * 16 * 3, 16, 32); /* three whole blocks */
    check_estimate(4 * 16 * 3 + 2, 16, 32); /* and a partial token left out */
    check_estimate(4 * 16 * 2 - 1, 16, 32); /* the last block ends in a padded token */
    check_estimate(4 * 16 * 2 - 3, 16, 32);
    check_estimate(4 * 4 * 20 + 1, 4, 5);   /* more blocks than max: the first max */
    check_estimate(4 * 16 - 1, 16, 32);     /* one padded block */
    check_estimate(4 * 16 - 4, 16, 32);     /* no whole block */
    check_estimate(3, 1, 32);
    check_estimate(0, 16, 32);
    /* a hand-computed chain of two blocks of two tokens: "abcdefghijklmno" */
    const uint8_t *t = (const uint8_t *)"abcdefghijklmno";
    uint32_t b0[2] = {0x64636261u, 0x68676665u}, b1[2] = {0x6c6b6a69u, 0x006f6e6du};
    uint64_t k0 = cr_route_block_hash(0, b0, 2), k1 = cr_route_block_hash(k0, b1, 2), keys[4];
    uint32_t prompt;
    CU_ASSERT_EQUAL_FATAL(cr_epp_keys_estimate(t, 15, 2, keys, 4, &prompt), 2);
    CU_ASSERT_EQUAL(prompt, 4);
    CU_ASSERT_EQUAL(keys[0], k0);
    CU_ASSERT_EQUAL(keys[1], k1);
    CU_ASSERT_EQUAL(cr_epp_keys_estimate(t, 15, 0, keys, 4, &prompt), 0);
}

/* ---- usage --------------------------------------------------------------- */

static int usage(const char *tail, uint32_t *prompt, uint32_t *cached)
{
    *prompt = *cached = 12345;
    return cr_openai_usage((const uint8_t *)tail, strlen(tail), prompt, cached);
}

static void test_usage(void)
{
    uint32_t p, c;
    const char *sse =
        "data: {\"id\":\"x\",\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\": {\\\"prompt_tokens\\\": 9}\"}}],"
        "\"usage\":null}\n\n"
        "data: {\"id\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":1200,\"completion_tokens\":5,"
        "\"total_tokens\":1205,\"prompt_tokens_details\":{\"cached_tokens\":1024}}}\n\n"
        "data: [DONE]\n\n";
    CU_ASSERT_EQUAL(usage(sse, &p, &c), 1);
    CU_ASSERT_EQUAL(p, 1200);
    CU_ASSERT_EQUAL(c, 1024);
    /* the tail cut in the middle of an earlier event */
    CU_ASSERT_EQUAL(usage(sse + 30, &p, &c), 1);
    CU_ASSERT_EQUAL(p, 1200);
    /* without prompt_tokens_details */
    CU_ASSERT_EQUAL(usage("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":77,\"completion_tokens\":1}}\n\n"
                          "data: [DONE]\n\n",
                          &p, &c),
                    1);
    CU_ASSERT_EQUAL(p, 77);
    CU_ASSERT_EQUAL(c, 0);
    /* a JSON body */
    CU_ASSERT_EQUAL(usage("{\"id\":\"c\",\"choices\":[{\"message\":{\"content\":\"hi\"}}],"
                          "\"usage\": {\"prompt_tokens\": 31, \"prompt_tokens_details\": "
                          "{\"cached_tokens\": 16}, \"completion_tokens\": 2}}",
                          &p, &c),
                    1);
    CU_ASSERT_EQUAL(p, 31);
    CU_ASSERT_EQUAL(c, 16);
    /* none: no usage, usage null only, a usage cut off, only an escaped one */
    CU_ASSERT_EQUAL(usage("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n",
                          &p, &c),
                    0);
    CU_ASSERT_EQUAL(usage("data: {\"choices\":[],\"usage\":null}\n\ndata: [DONE]\n\n", &p, &c), 0);
    CU_ASSERT_EQUAL(usage("{\"usage\":{\"prompt_tokens\":3", &p, &c), 0);
    CU_ASSERT_EQUAL(usage("{\"content\":\"\\\"usage\\\":{\\\"prompt_tokens\\\":3}\"}", &p, &c), 0);
    CU_ASSERT_EQUAL(usage("", &p, &c), 0);
    CU_ASSERT_EQUAL(usage("\"usage\"", &p, &c), 0);
}

static const cr_test_case reader_tests[] = {
    {"kind by method and path", test_kind_of},
    {"chat fields and content forms", test_chat_fields},
    {"prompt forms", test_prompt_forms},
    {"every refusal names the field and what it got", test_refusals},
    {"at most 65,536 messages", test_too_many_messages},
    {"deep nesting refused before the parser", test_deep_nesting},
    {"a 10 MB body", test_ten_megabytes},
    {NULL, NULL}};
static const cr_test_case keys_tests[] = {{"keys against a cr_route_block_hash chain", test_keys},
                                          {NULL, NULL}};
static const cr_test_case usage_tests[] = {{"usage from SSE and JSON bodies", test_usage},
                                           {NULL, NULL}};

static const cr_test_suite suites[] = {
    {"reader", reader_tests}, {"keys", keys_tests}, {"usage", usage_tests}};

CR_TEST_MAIN(suites)
