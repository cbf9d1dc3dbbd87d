// The bare-metal harness of bench/tflm_peer.sh: TFLite Micro (+ CMSIS-NN) running one embedded
// .tflite model on the emulated Arm MPS boards, linked with examples/mcu-app/start.c (vector
// table, reset handler, stack paint, semihosting exit) and the board's linker script.
//
// Built per model with:
//   -include <model>_ops.h   defines TFLM_OPS(X): X(Conv2D, ) X(Softmax, ) ..., the
//                            model's builtin operators (MicroMutableOpResolver::Add<Name>), so
//                            that only the kernels the model uses are linked, as a product would
//                            do; each with its default registration (CMSIS-NN's kernel for every
//                            type it supports: int8, int16, int4 weights), or with
//                            -DTFLM_INT8_REGISTRATIONS the int8-only one (Register_<NAME>_INT8)
//                            where TFLM has it (TFLM_OPS_INT8(X): X(Conv2D,
//                            tflite::Register_CONV_2D_INT8()) ...)
//   <model>_data.cc          `g_model`, the .tflite file as a const array (in the section
//                            .rodata.xla_aot.tflm_model: where the boards' linker scripts put
//                            our models' weights, the QSPI flash window on mps3-an547)
//   -DREPEAT=<n>             inferences on the same input (bench/tflm_peer.sh counts 1 and 1 + N
//                            and divides the difference by N, as bench/arm_bench.py does for ours)
//
// Input element k of input i is, as in examples/mcu-app/main.c, ((k * 7 + i * 13) % 17 - 8) * 15
// for int8/uint8 tensors and ((k * 7 + i * 13) % 17 - 8) / 8 for float ones. Printed over
// semihosting: `arena_used_bytes N`, per output `out<i> type=T bytes=B checksum=C first=v0,v1,...`
// (C: FNV-1a of the output's bytes), `stack_high_water N`, then `status S`.
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tensorflow/lite/schema/schema_generated.h"

#ifndef REPEAT
#define REPEAT 1
#endif
#ifndef ARENA_BYTES
#define ARENA_BYTES (256 * 1024)
#endif

extern "C" long mcu_stack_high_water(void);
extern const unsigned char g_model[];
extern const unsigned int g_model_len;

#ifndef INPUT_COPY_BYTES
#define INPUT_COPY_BYTES (128 * 1024)
#endif

namespace {
alignas(16) uint8_t tensor_arena[ARENA_BYTES];
// The inputs, filled once and copied into the input tensors before every inference: TFLM's memory
// planner lets later tensors reuse an input's arena bytes, so an application writes its input
// before each Invoke (a memcpy: a few thousand instructions at most, counted with the inference).
alignas(16) uint8_t input_copy[INPUT_COPY_BYTES];

#ifdef TFLM_INT8_REGISTRATIONS
#define TFLM_OPS_USED TFLM_OPS_INT8
#else
#define TFLM_OPS_USED TFLM_OPS
#endif
#define TFLM_COUNT_OP(name, registration) +1
constexpr int kNumOps = 0 TFLM_OPS_USED(TFLM_COUNT_OP);
using Resolver = tflite::MicroMutableOpResolver<kNumOps>;

void fill_input(TfLiteTensor* t, int i) {
  const size_t n = t->bytes;
  switch (t->type) {
    case kTfLiteInt8:
      for (size_t k = 0; k < n; k++) t->data.int8[k] = (int8_t)(((int)((k * 7 + i * 13) % 17) - 8) * 15);
      break;
    case kTfLiteUInt8:
      for (size_t k = 0; k < n; k++) t->data.uint8[k] = (uint8_t)(128 + ((int)((k * 7 + i * 13) % 17) - 8) * 15);
      break;
    case kTfLiteFloat32:
      for (size_t k = 0; k < n / 4; k++) t->data.f[k] = (float)((int)((k * 7 + i * 13) % 17) - 8) / 8.0f;
      break;
    default:
      memset(t->data.raw, 0, n);
  }
}

void print_output(const TfLiteTensor* t, int i) {
  uint32_t h = 2166136261u;
  const uint8_t* p = (const uint8_t*)t->data.raw;
  for (size_t k = 0; k < t->bytes; k++) h = (h ^ p[k]) * 16777619u;
  printf("out%d type=%d bytes=%u checksum=%08lx first=", i, (int)t->type, (unsigned)t->bytes,
         (unsigned long)h);
  size_t shown = 0;
  if (t->type == kTfLiteFloat32) {
    for (; shown < t->bytes / 4 && shown < 12; shown++)
      printf("%s%d/1000", shown ? "," : "", (int)(t->data.f[shown] * 1000.0f));
  } else {
    for (; shown < t->bytes && shown < 12; shown++)
      printf("%s%d", shown ? "," : "",
             t->type == kTfLiteInt8 ? (int)t->data.int8[shown] : (int)p[shown]);
  }
  printf("\n");
}
}  // namespace

int main(void) {
  const tflite::Model* model = tflite::GetModel(g_model);
  if (model->version() != TFLITE_SCHEMA_VERSION) {
    printf("schema version %lu, not %d\n", (unsigned long)model->version(), TFLITE_SCHEMA_VERSION);
    return 2;
  }
  static Resolver resolver;
#define TFLM_ADD_OP(name, registration)                    \
  if (resolver.Add##name(registration) != kTfLiteOk) {     \
    printf("Add" #name " failed\n");                       \
    return 3;                                              \
  }
  TFLM_OPS_USED(TFLM_ADD_OP)
  static tflite::MicroInterpreter interpreter(model, resolver, tensor_arena, sizeof tensor_arena);
  if (interpreter.AllocateTensors() != kTfLiteOk) {
    printf("AllocateTensors failed\n");
    return 4;
  }
  size_t copied = 0;
  for (size_t i = 0; i < interpreter.inputs_size(); i++) {
    TfLiteTensor* t = interpreter.input(i);
    fill_input(t, (int)i);
    if (copied + t->bytes > sizeof input_copy) {
      printf("inputs exceed INPUT_COPY_BYTES\n");
      return 6;
    }
    memcpy(input_copy + copied, t->data.raw, t->bytes);
    copied += t->bytes;
  }
  int status = 0;
  for (int r = 0; r < REPEAT; r++) {
    copied = 0;
    for (size_t i = 0; i < interpreter.inputs_size(); i++) {
      TfLiteTensor* t = interpreter.input(i);
      memcpy(t->data.raw, input_copy + copied, t->bytes);
      copied += t->bytes;
    }
    if (interpreter.Invoke() != kTfLiteOk && status == 0) status = 5;
  }
  printf("arena_used_bytes %u\n", (unsigned)interpreter.arena_used_bytes());
  for (size_t i = 0; i < interpreter.outputs_size(); i++) print_output(interpreter.output(i), (int)i);
  printf("stack_high_water %ld\n", mcu_stack_high_water());
  printf("status %d\n", status);
  return status;
}
