/* The C launcher of ferry_k_pieces.cu: pieces of a copy moved by a kernel that reads (H2D) or
 * writes (D2H) the pinned host memory itself, over the link, a block a piece. */
#ifndef FERRY_K_PIECES_H
#define FERRY_K_PIECES_H

#ifdef __cplusplus
extern "C" {
#endif

/* A piece: @bytes at host address @host (pinned, usable by the device at that address) and at
 * @off in the device buffer. */
typedef struct ferry_k_piece {
    unsigned long long host;
    unsigned int off, bytes;
} ferry_k_piece_t;

/* Pieces one launch takes: their table is the kernel's parameter (copied by the launch, so the
 * caller's table may be reused at once), within the 4 KiB every CUDA version accepts. */
#define FERRY_K_PIECES_MAX 240u

/* Move @n pieces (at most FERRY_K_PIECES_MAX) between host memory and @dbuf (device memory),
 * host to device when @to_dev, on @stream (a cudaStream_t). Returns a cudaError_t as int. */
int ferry_k_pieces_launch(const ferry_k_piece_t *pieces, unsigned n, unsigned char *dbuf,
                          int to_dev, void *stream);

#ifdef __cplusplus
}
#endif
#endif
