/* test_decode_bad.c - proto/decode.c (with jscan.c, jtree.c): every
 * malformed request case with its exact message (the rest of the JSON
 * decode: test_decode.c; binary framing: test_decode_binary.c). Every case
 * runs twice (decode_helper.h). */
#include <check.h>
#include <string.h>

#include "core/attn.h"
#include "tests/check_main.h"
#include "tests/proto/decode_helper.h"

/* 32 members first: the scanner remembers that many keys of an object
 * for its duplicate check; a duplicate after them is caught all the same */
#define K32 "'k00':0,'k01':0,'k02':0,'k03':0,'k04':0,'k05':0,'k06':0,'k07':0,'k08':0,'k09':0,'k10':0,'k11':0,'k12':0,'k13':0,'k14':0,'k15':0,'k16':0,'k17':0,'k18':0,'k19':0,'k20':0,'k21':0,'k22':0,'k23':0,'k24':0,'k25':0,'k26':0,'k27':0,'k28':0,'k29':0,'k30':0,'k31':0,"

static const struct bad {
    const char *json;
    int code;
    const char *msg;
} bad[] = {
    {"hello", ATTN_EINVAL, "request body: expected a JSON object, got 'hello'"},
    {"[1]", ATTN_EINVAL, "request body: expected a JSON object, got '[1]'"},
    {"", ATTN_EINVAL, "request body: empty; expected a JSON object"},
    /* what users send by mistake is named: curl -F, a gzip file, a BOM */
    {"--------------------------4f3a\r\nContent-Disposition: form-data",
     ATTN_EINVAL, "request body: expected a JSON object, got "
                  "'--------------------------4f3a..'...: a form upload "
                  "(curl -F)? send the JSON itself (curl -d @file)"},
    {"\x1f\x8b\x08\x00", ATTN_EINVAL, "request body: expected a JSON object, "
                                    "got gzip-compressed data: send it "
                                    "uncompressed"},
    {"\xef\xbb\xbf{}", ATTN_EINVAL, "request body: expected a JSON object, got "
                                  "a UTF-8 byte-order mark: send the JSON "
                                  "without it"},
    {"{", ATTN_EINVAL, "request body: invalid JSON at byte 1: expected a "
                       "string key"},
    {"{} x", ATTN_EINVAL, "request body: invalid JSON at byte 3: data after "
                          "the JSON object"},
    /* binary tensors sent without their header: the length to send is the
     * JSON's, not counting the data's first bytes though blank (0x20) */
    {"{} \x01\x02", ATTN_EINVAL, "request body: data after the JSON object, "
                               "which ends at byte 2 (binary tensors after a "
                               "JSON header need the Inference-Header-Content-"
                               "Length header: 2 for this one; missing or 0, the "
                               "body is all JSON)"},
    {"{'inputs':[{'parameters':{'binary_data_size':4}}]}abcd", ATTN_EINVAL,
     "request body: data after the JSON object, which ends at byte 50 (binary "
     "tensors after a JSON header need the Inference-Header-Content-Length "
     "header: 50 for this one; missing or 0, the body is all JSON)"},
    {"{'a':tru}", ATTN_EINVAL, "request body: invalid JSON at byte 5: "
                               "unexpected 'tru' (not a JSON value)"},
    {"{'a':NaN}", ATTN_EINVAL, "request body: invalid JSON at byte 5: "
                               "unexpected 'NaN' (JSON has no NaN or infinity)"},
    {"{'a':'\x01'}", ATTN_EINVAL, "request body: invalid JSON at byte 6: "
                                  "control character in string"},
    {"{'a':'\\x'}", ATTN_EINVAL, "request body: invalid JSON at byte 7: bad "
                                 "escape"},
    {"{'a':[1,]}", ATTN_EINVAL, "request body: invalid JSON at byte 8: "
                                "unexpected character"},
    {"{'a':01}", ATTN_EINVAL, "request body: invalid JSON at byte 6: expected "
                              "',' or '}'"},
    {"{'id':'a','id':'b','inputs':[" X2 "]}", ATTN_EINVAL,
     "request body: duplicate key \"id\""},
    {"{'inputs':[{'name':'x','name':'y'}]}", ATTN_EINVAL,
     "inputs[0]: duplicate key \"name\""},
    {"{'parameters':{'causal':true,'c\\u0061usal':false},'inputs':[" X2 "]}",
     ATTN_EINVAL, "parameters: duplicate key \"causal\""},
    {"{'outputs':[{'name':'y'},{'name':'a','name':'b'}],'inputs':[" X2 "]}",
     ATTN_EINVAL, "outputs[1]: duplicate key \"name\""},
    {"{'outputs':[{'name':'y','parameters':{'binary_data':true,"
     "'binary_data':false}}],'inputs':[" X2 "]}", ATTN_EINVAL,
     "outputs[0].parameters: duplicate key \"binary_data\""},
    {"{'inputs':[" X2 ",{'name':'z','datatype':'FP32','shape':[1],"
     "'parameters':{'binary_data_size':4,'binary_data_size':4}}]}",
     ATTN_EINVAL, "inputs[1].parameters: duplicate key \"binary_data_size\""},
    {"{'x':{'a':1,'a':2},'inputs':[" X2 "]}", ATTN_EINVAL,
     "request body: invalid JSON: duplicate object key near '\"a\"'"},
    {"{'a_key_longer_than_twenty_four':1,'a_key_longer_than_twenty_four':2,'inputs':[" X2 "]}",
     ATTN_EINVAL, "request body: invalid JSON: duplicate object key"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[1],'data':[1],"
     "'data':[2]}]}", ATTN_EINVAL, "inputs[0]: duplicate key \"data\""},
    {"{'inputs':[{'data':[1,2]}],'inputs':[" X2 "]}", ATTN_EINVAL,
     "request body: duplicate key \"inputs\""},
    {"{'inputs':[{" K32 "'name':'x','datatype':'FP32','shape':[1],'data':[1],"
     "'data':[2]}]}", ATTN_EINVAL, "inputs[0]: duplicate key \"data\""},
    {"{" K32 "'inputs':[" X2 "],'inputs':[" X2 "]}", ATTN_EINVAL,
     "request body: duplicate key \"inputs\""},
    {"{'id':'a'}", ATTN_EINVAL, "inputs: missing"},
    {"{'inputs':{}}", ATTN_EINVAL, "inputs: expected an array"},
    {"{'inputs':[]}", ATTN_EINVAL, "inputs: empty"},
    {"{'inputs':[1]}", ATTN_EINVAL, "inputs[0]: expected an object"},
    {"{'inputs':[{'datatype':'FP32','shape':[1],'data':[1]}]}", ATTN_EINVAL,
     "inputs[0].name: missing"},
    {"{'inputs':[{'name':3,'datatype':'FP32','shape':[1],'data':[1]}]}",
     ATTN_EINVAL, "inputs[0].name: expected a string"},
    {"{'inputs':[{'name':'','datatype':'FP32','shape':[1],'data':[1]}]}",
     ATTN_EINVAL, "inputs[0].name: must be 1 to 63 bytes"},
    {"{'inputs':[{'name':'0123456789012345678901234567890123456789012345678901"
     "234567890123','datatype':'FP32','shape':[1],'data':[1]}]}",
     ATTN_EINVAL, "inputs[0].name: must be 1 to 63 bytes"},
    {"{'inputs':[" X2 "," X2 "]}", ATTN_EINVAL,
     "inputs[1].name: duplicate input \"x\""},
    {"{'inputs':[{'name':'x','shape':[1],'data':[1]}]}", ATTN_EINVAL,
     "inputs[0].datatype: missing"},
    {"{'inputs':[{'name':'x','datatype':7,'shape':[1],'data':[1]}]}",
     ATTN_EINVAL, "inputs[0].datatype: expected a string"},
    {"{'inputs':[{'name':'x','datatype':'FP64','shape':[1],'data':[1]}]}",
     ATTN_EINVAL, "inputs[0].datatype: \"FP64\" is not supported (BOOL, INT32, "
                  "INT64, FP16, BF16 or FP32)"},
    {"{'inputs':[{'name':'x','datatype':'BYTES','shape':[1],'data':['a']}]}",
     ATTN_EINVAL, "inputs[0].datatype: \"BYTES\" is not supported (BOOL, "
                  "INT32, INT64, FP16, BF16 or FP32)"},
    {"{'inputs':[{'name':'x','datatype':'FP32','data':[1]}]}", ATTN_EINVAL,
     "inputs[0].shape: missing"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':3,'data':[1]}]}",
     ATTN_EINVAL, "inputs[0].shape: expected an array of integers"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[],'data':[1]}]}",
     ATTN_EINVAL, "inputs[0].shape: rank 0, must be 1 to 8"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[1,1,1,1,1,1,1,1,1],"
     "'data':[1]}]}", ATTN_EINVAL, "inputs[0].shape: rank 9, must be 1 to 8"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2,2,-3],'data':[1]}]}",
     ATTN_EINVAL, "inputs[0].shape: dimension 2 is -3, must be >= 1"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[0],'data':[]}]}",
     ATTN_EINVAL, "inputs[0].shape: dimension 0 is 0, must be >= 1"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2,'3'],'data':[1]}]}",
     ATTN_EINVAL, "inputs[0].shape: dimension 1 is not an integer"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2.0],'data':[1,2]}]}",
     ATTN_EINVAL, "inputs[0].shape: dimension 0 is not an integer"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[4294967296,"
     "4294967296],'data':[1]}]}", ATTN_EOVERFLOW,
     "inputs[0].shape: element count overflows"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[99999999999999999999]"
     ",'data':[1]}]}", ATTN_EINVAL, "request body: invalid JSON: too big "
                                   "integer near '99999999999999999999'"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[1000000000,100],"
     "'data':[1]}]}", ATTN_EFULL,
     "inputs[0].shape: 100000000000 elements, at most 67108864"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[3,4],"
     "'data':[1,2,3,4,5,6,7,8,9,10,11]}]}", ATTN_EINVAL,
     "inputs[0].data: expected 12 values, got 11"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[3,4],"
     "'data':[[1,2,3,4],[5,6,7,8],[9,10,11,12],[13]]}]}", ATTN_EINVAL,
     "inputs[0].data: expected 12 values, got 13"},
    {"{'inputs':[" X2 ",{'name':'m','datatype':'BOOL','shape':[2],"
     "'data':[true,1]}]}", ATTN_EINVAL,
     "inputs[1].data[1]: expected true or false, got a number"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2],'data':[1,'2']}]}",
     ATTN_EINVAL, "inputs[0].data[1]: expected a number, got a string"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2],'data':[1,null]}]}",
     ATTN_EINVAL, "inputs[0].data[1]: expected a number, got null"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2],'data':[1,nan]}]}",
     ATTN_EINVAL, "inputs[0].data[1]: expected a number, got 'nan' (JSON has "
                  "no NaN or infinity)"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2],'data':[-Infinity,1]}]}",
     ATTN_EINVAL, "inputs[0].data[0]: expected a number, got '-Infinity' (JSON "
                  "has no NaN or infinity)"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2],'data':[{},1]}]}",
     ATTN_EINVAL, "inputs[0].data[0]: expected a number, got an object"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2],'data':[1,true]}]}",
     ATTN_EINVAL, "inputs[0].data[1]: expected a number, got a boolean"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2],'data':[1e39,1]}]}",
     ATTN_EINVAL, "inputs[0].data[0]: 1e39 is out of FP32 range"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2],'data':[1,-1e999]}]}",
     ATTN_EINVAL, "inputs[0].data[1]: -1e999 is out of FP32 range"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2],'data':[1,2]x}]}",
      ATTN_EINVAL, "request body: invalid JSON at byte 65: expected ',' or "
                  "'}'"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2],'data':[1,,2]}]}",
     ATTN_EINVAL, "inputs[0].data: invalid JSON at byte 3: unexpected "
                  "character"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2],'data':[1 2]}]}",
     ATTN_EINVAL, "inputs[0].data: invalid JSON at byte 3: expected ',' or "
                  "']'"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2],'data':[1,2}]}",
     ATTN_EINVAL, "request body: invalid JSON at byte 65: expected ',' or "
                  "'}'"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2],'data':[1,2]]}",
     ATTN_EINVAL, "request body: invalid JSON at byte 65: expected ',' or "
                  "'}'"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2],'data':[1,2}]}]}",
     ATTN_EINVAL, "request body: invalid JSON at byte 65: expected ',' or "
                  "'}'"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[1],'data':5}]}",
     ATTN_EINVAL, "inputs[0].data: expected an array, got a number"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[1],'data':[']']}]}",
     ATTN_EINVAL, "inputs[0].data[0]: expected a number, got a string"},
    {"{'inputs':[{'name':'x','datatype':'INT32','shape':[1],'data':[1.5]}]}",
     ATTN_EINVAL, "inputs[0].data[0]: expected an integer, got 1.5"},
    {"{'inputs':[{'name':'x','datatype':'INT32','shape':[2],"
     "'data':[-2147483648,2147483648]}]}", ATTN_EINVAL,
     "inputs[0].data[1]: 2147483648 is out of INT32 range"},
    {"{'inputs':[{'name':'x','datatype':'INT64','shape':[1],"
     "'data':[9223372036854775808]}]}", ATTN_EINVAL,
     "inputs[0].data[0]: 9223372036854775808 is out of INT64 range"},
    {"{'inputs':[{'name':'x','datatype':'FP16','shape':[1],'data':[1]}]}",
     ATTN_EINVAL, "inputs[0].data: FP16 values must be sent as binary data "
                  "(parameters.binary_data_size)"},
    {"{'inputs':[{'name':'x','datatype':'BF16','shape':[1],'data':[1]}]}",
     ATTN_EINVAL, "inputs[0].data: BF16 values must be sent as binary data "
                  "(parameters.binary_data_size)"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[1]}]}", ATTN_EINVAL,
     "inputs[0]: missing data (or parameters.binary_data_size)"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[1],'data':[1],"
     "'parameters':[]}]}", ATTN_EINVAL,
     "inputs[0].parameters: expected an object"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[1],"
     "'parameters':{'binary_data_size':4}}]}", ATTN_EINVAL,
     "inputs[0].parameters.binary_data_size: the request has no binary part "
     "(Inference-Header-Content-Length missing, or 0: all JSON)"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[1],"
     "'parameters':{'binary_data_size':-4}}]}", ATTN_EINVAL,
     "inputs[0].parameters.binary_data_size: expected a non-negative "
     "integer"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[1],'data':[1],"
     "'parameters':{'binary_data_size':4}}]}", ATTN_EINVAL,
     "inputs[0]: both data and parameters.binary_data_size given"},
    {"{'id':5,'inputs':[" X2 "]}", ATTN_EINVAL, "id: expected a string"},
    {"{'parameters':1,'inputs':[" X2 "]}", ATTN_EINVAL,
     "parameters: expected an object"},
    {"{'parameters':{'causal':1},'inputs':[" X2 "]}", ATTN_EINVAL,
     "parameters.causal: expected true or false"},
    {"{'parameters':{'retain':'yes'},'inputs':[" X2 "]}", ATTN_EINVAL,
     "parameters.retain: expected true or false"},
    {"{'parameters':{'binary_data_output':null},'inputs':[" X2 "]}",
     ATTN_EINVAL, "parameters.binary_data_output: expected true or false"},
    {"{'parameters':{'tokens':'a b'},'inputs':[" X2 "]}", ATTN_EINVAL,
     "parameters.tokens: expected an array of strings"},
    {"{'parameters':{'tokens':['a',2]},'inputs':[" X2 "]}", ATTN_EINVAL,
     "parameters.tokens[1]: expected a string"},
    /* one list per batch item: all lists, all as long, of strings */
    {"{'parameters':{'tokens':[['a'],'b']},'inputs':[" X2 "]}", ATTN_EINVAL,
     "parameters.tokens[1]: expected a list of strings, as tokens[0] is "
     "(one list per batch item)"},
    {"{'parameters':{'tokens':['a',['b']]},'inputs':[" X2 "]}", ATTN_EINVAL,
     "parameters.tokens[1]: expected a string (one list for every batch "
     "item; or every entry a list, one per item)"},
    {"{'parameters':{'tokens':[['a','b'],['c']]},'inputs':[" X2 "]}",
     ATTN_EINVAL, "parameters.tokens[1]: 1 label, tokens[0] has 2 (every "
     "batch item's list is as long)"},
    {"{'parameters':{'tokens':[['a'],[{}]]},'inputs':[" X2 "]}", ATTN_EINVAL,
     "parameters.tokens[1][0]: expected a string"},
    {"{'outputs':{},'inputs':[" X2 "]}", ATTN_EINVAL,
     "outputs: expected an array"},
    {"{'outputs':['y'],'inputs':[" X2 "]}", ATTN_EINVAL,
     "outputs[0]: expected an object"},
    {"{'outputs':[{'parameters':{}}],'inputs':[" X2 "]}", ATTN_EINVAL,
     "outputs[0].name: missing"},
    {"{'outputs':[{'name':1}],'inputs':[" X2 "]}", ATTN_EINVAL,
     "outputs[0].name: expected a string"},
    {"{'outputs':[{'name':'y'},{'name':'y'}],'inputs':[" X2 "]}", ATTN_EINVAL,
     "outputs[1].name: duplicate output \"y\""},
    {"{'outputs':[{'name':'y','parameters':{'binary_data':1}}],'inputs':[" X2
     "]}", ATTN_EINVAL, "outputs[0].parameters.binary_data: expected true or "
                        "false"},
    {"{'outputs':[{'name':'y','parameters':5}],'inputs':[" X2 "]}",
     ATTN_EINVAL, "outputs[0].parameters: expected an object"},
    /* Triton's classification (tritonclient's class_count): refused, not
     * answered with the whole tensor (0, none asked, passes: below) */
    {"{'outputs':[{'name':'y'},{'name':'attention','parameters':"
     "{'classification':2}}],'inputs':[" X2 "]}", ATTN_EINVAL,
     "outputs[1].parameters.classification: attnd does not serve Triton's "
     "classification extension (the top classes as BYTES); ask for the "
     "output without it and take its largest values yourself"},
    {"{'outputs':[{'name':'y','parameters':{'binary_data':true,"
     "'classification':'1'}}],'inputs':[" X2 "]}", ATTN_EINVAL,
     "outputs[0].parameters.classification: attnd does not serve Triton's "
     "classification extension (the top classes as BYTES); ask for the "
     "output without it and take its largest values yourself"},
    /* Triton's shared-memory extension (tritonclient's
     * set_shared_memory): refused, not answered in the body while the
     * client reads its region (an output), nor "missing data" (an input) */
    {"{'outputs':[{'name':'y','parameters':{'shared_memory_region':'o',"
     "'shared_memory_byte_size':64}}],'inputs':[" X2 "]}", ATTN_EINVAL,
     "outputs[0].parameters.shared_memory_region: attnd does not serve "
     "Triton's shared-memory extension (system or CUDA; /v2 does not list "
     "it); ask for the output without it: it comes in the answer"},
    {"{'outputs':[{'name':'y','parameters':{'shared_memory_offset':0}}],"
     "'inputs':[" X2 "]}", ATTN_EINVAL,
     "outputs[0].parameters.shared_memory_offset: attnd does not serve "
     "Triton's shared-memory extension (system or CUDA; /v2 does not list "
     "it); ask for the output without it: it comes in the answer"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[1,2],'parameters':"
     "{'shared_memory_region':'i','shared_memory_byte_size':8}}]}",
     ATTN_EINVAL,
     "inputs[0].parameters.shared_memory_region: attnd does not serve "
     "Triton's shared-memory extension (system or CUDA; /v2 does not list "
     "it); send the tensor in the request instead"},
    /* a parameter misspelling one attnd reads: refused, not ignored
     * (casual left the model's default, sequence_edn the sequence live) */
    {"{'parameters':{'casual':true},'inputs':[" X2 "]}", ATTN_EINVAL,
     "parameters.casual: not a parameter attnd reads; did you mean "
     "'causal'? (others it does not know pass, as Triton passes them to "
     "its backend)"},
    {"{'parameters':{'sequence_id':7,'sequence_edn':true},'inputs':[" X2 "]}",
     ATTN_EINVAL, "parameters.sequence_edn: not a parameter attnd reads; "
     "did you mean 'sequence_end'? (others it does not know pass, as Triton passes them to "
     "its backend)"},
    {"{'parameters':{'sequenceStart':true},'inputs':[" X2 "]}", ATTN_EINVAL,
     "parameters.sequenceStart: not a parameter attnd reads; did you mean "
     "'sequence_start'? (others it does not know pass, as Triton passes them to "
     "its backend)"},
    {"{'parameters':{'Scale':0.5},'inputs':[" X2 "]}", ATTN_EINVAL,
     "parameters.Scale: not a parameter attnd reads; did you mean 'scale'? (others it does not know pass, as Triton passes them to "
     "its backend)"},
    {"{'parameters':{'token':['a','b']},'inputs':[" X2 "]}", ATTN_EINVAL,
     "parameters.token: not a parameter attnd reads; did you mean 'tokens'? (others it does not know pass, as Triton passes them to "
     "its backend)"},
    {"{'parameters':{'sequence_postion':0},'inputs':[" X2 "]}", ATTN_EINVAL,
     "parameters.sequence_postion: not a parameter attnd reads; did you "
     "mean 'sequence_position'? (others it does not know pass, as Triton passes them to "
     "its backend)"},
    {"{'outputs':[{'name':'y','parameters':{'binary_dat':true}}],'inputs':["
     X2 "]}", ATTN_EINVAL, "outputs[0].parameters.binary_dat: not a "
     "parameter attnd reads; did you mean 'binary_data'? (others it does not know pass, as Triton passes them to "
     "its backend)"},
    {"{'inputs':[{'name':'x','datatype':'FP32','shape':[2],'data':[1,2],"
     "'parameters':{'binary_data_sise':8}}]}", ATTN_EINVAL,
     "inputs[0].parameters.binary_data_sise: not a parameter attnd reads; "
     "did you mean 'binary_data_size'? (others it does not know pass, as Triton passes them to "
     "its backend)"},
};

START_TEST(bad_request)
{
    const struct bad *b = &bad[_i];
    oip_request r;
    char err[OIP_ERRMAX] = "";
    int rc = dec_lim(&r, b->json, NULL, err);
    const char *want = b->msg;
    if (rc != b->code || strcmp(err, want))
        ck_abort_msg("case %d: %s\n  got %d '%s'\n want %d '%s'", _i,
                     b->json, rc, err, b->code, want);
    ck_assert_int_eq(r.n_inputs, 0);
    ck_assert_ptr_null(r.inputs);
    oip_request_free(&r);
}
END_TEST

static void add_cases(TCase *tc)
{
    tcase_add_loop_test(tc, bad_request, 0, sizeof bad / sizeof bad[0]);
}

static Suite *decode_bad_suite(void) { return decode_suite_twice("decode_bad", add_cases); }

TU_MAIN(decode_bad_suite)
