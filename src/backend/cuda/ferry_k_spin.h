/* The C launcher of ferry_k_spin.cu: one block that spins for @ns nanoseconds of the GPU's
 * global timer, on @stream (a cudaStream_t). Returns a cudaError_t as int. */
#ifndef FERRY_K_SPIN_H
#define FERRY_K_SPIN_H

#ifdef __cplusplus
extern "C" {
#endif

int ferry_k_spin_launch(unsigned long long ns, void *stream);

#ifdef __cplusplus
}
#endif
#endif
