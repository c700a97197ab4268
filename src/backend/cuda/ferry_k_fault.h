/* The C launcher of ferry_k_fault.cu: kernels that fault on purpose (tests only). */
#ifndef FERRY_K_FAULT_H
#define FERRY_K_FAULT_H

#ifdef __cplusplus
extern "C" {
#endif

enum { FERRY_K_FAULT_ILLEGAL_ADDRESS = 0, FERRY_K_FAULT_TRAP = 1 };

/* Queue the faulting kernel @kind on @stream (a cudaStream_t). Returns a cudaError_t as int. */
int ferry_k_fault_launch(int kind, void *stream);

#ifdef __cplusplus
}
#endif
#endif
