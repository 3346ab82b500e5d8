// SPDX-License-Identifier: Apache-2.0
/* A small C program that uses only kolo.h: every rank allreduces a vector, gathers a ragged
 * tensor and checks the results. Build: cc allreduce.c $(pkg-config --cflags --libs kolo)
 * Run:   kolorun -np 2 ./kolo-example-allreduce */
#include <kolo.h>
#include <stdio.h>
#include <stdlib.h>

static int check(int rc, const char* what) {
  if (rc != KOLO_OK) {
    fprintf(stderr, "%s failed: %s\n", what, kolo_last_error());
    exit(1);
  }
  return rc;
}

int main(void) {
  check(kolo_init(), "kolo_init");
  int rank = kolo_rank(), size = kolo_size();

  /* Allreduce (sum) of 1M floats, in place. */
  enum { N = 1 << 20 };
  float* data = malloc(N * sizeof(float));
  for (int i = 0; i < N; ++i) data[i] = (float)(rank + 1);
  int64_t shape[1] = {N};
  kolo_tensor_t t = {data, KOLO_FLOAT32, 1, shape, KOLO_CPU_DEVICE, NULL};
  kolo_handle_t h;
  check(kolo_allreduce_async("example.sum", &t, NULL, KOLO_SUM, 1.0, 1.0,
                             KOLO_GLOBAL_PROCESS_SET, NULL, NULL, &h), "allreduce");
  check(kolo_handle_wait(h, 60.0), "wait");
  kolo_handle_release(h);
  float expect = (float)(size * (size + 1) / 2);
  for (int i = 0; i < N; ++i) {
    if (data[i] != expect) {
      fprintf(stderr, "rank %d: data[%d] = %f, expected %f\n", rank, i, data[i], expect);
      return 1;
    }
  }

  /* Allgather: rank r contributes r + 1 rows of 3 int32; the handle owns the output. */
  int64_t rows = rank + 1;
  int32_t* mine = malloc((size_t)rows * 3 * sizeof(int32_t));
  for (int i = 0; i < rows * 3; ++i) mine[i] = rank;
  int64_t gshape[2] = {rows, 3};
  kolo_tensor_t g = {mine, KOLO_INT32, 2, gshape, KOLO_CPU_DEVICE, NULL};
  check(kolo_allgather_async("example.gather", &g, NULL, NULL, KOLO_GLOBAL_PROCESS_SET, NULL,
                             NULL, &h), "allgather");
  check(kolo_handle_wait(h, 60.0), "wait");
  void* out;
  int32_t ndim;
  int64_t oshape[KOLO_MAX_DIMS];
  check(kolo_handle_output(h, &out, &ndim, oshape), "output");
  const int32_t* got = out;
  int64_t row = 0;
  for (int r = 0; r < size; ++r) {
    for (int k = 0; k <= r; ++k, ++row) {
      if (got[row * 3] != r) {
        fprintf(stderr, "rank %d: gathered row %lld = %d, expected %d\n", rank, (long long)row,
                got[row * 3], r);
        return 1;
      }
    }
  }
  kolo_handle_release(h);

  if (rank == 0) {
    printf("kolo %s: %d ranks over %s; allreduce of %d floats and a ragged allgather of %lld "
           "rows are correct\n", kolo_version(), size, kolo_transport_name(), N,
           (long long)oshape[0]);
  }
  free(data);
  free(mine);
  check(kolo_shutdown(), "kolo_shutdown");
  return 0;
}
