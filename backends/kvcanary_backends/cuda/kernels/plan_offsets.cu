// plan_offsets.cu: plan stage 1 alone (SGLang's launch_plan_offsets_kernel): each row's exclusive verify
// offset into the scratch (total at [bs]), the write offsets [0..bs], the seeds [0, bs), num_valid, enable and
// num_valid_reqs. Entries past bs are left as they are (unlike the fused plan, which zeroes write_offsets).
//
// Semantics: backends/torch_ref/plan_offsets.py. Launch: one block (bs <= 4096 rows), one block scan of the
// (verify length, write length) pairs that writes every output from its second pass. Specializations:
// KVC_THREADS, KVC_HAS_LUT. No dynamic shared memory.
#include "plan_common.cuh"

#ifndef KVC_THREADS
#define KVC_THREADS 512
#endif
#ifndef KVC_HAS_LUT
#define KVC_HAS_LUT 0
#endif

using namespace kvc;

extern "C" __global__ void __launch_bounds__(KVC_THREADS)
    kvc_plan_offsets(const long long* __restrict__ req_pool_indices, const long long* __restrict__ prefix_lens,
                     const long long* __restrict__ extend_seq_lens, const int* __restrict__ req_to_token,
                     long long rtt_rows, long long rtt_cols, const long long* __restrict__ lut, long long lut_len,
                     long long window, long long bs, long long verify_capacity, long long* __restrict__ scratch,
                     long long* __restrict__ write_offsets, long long write_offsets_len,
                     long long* __restrict__ write_seeds, int* __restrict__ out_num_valid,
                     int* __restrict__ out_enable, int* __restrict__ write_num_valid_reqs) {
  __shared__ u64 warp_tmp[2 * KVC_THREADS / 32];
  const PlanInputs in{req_pool_indices, prefix_lens, extend_seq_lens, req_to_token, rtt_rows, rtt_cols,
                      lut, lut_len, window, bs};
  const OffsetsOutputs out{scratch, write_offsets, write_seeds, out_num_valid, out_enable, write_num_valid_reqs,
                           write_offsets_len, false};
  plan_offsets_block<KVC_THREADS, KVC_HAS_LUT != 0>(in, warp_tmp, verify_capacity, out);
}
