/*
 * gemmini_emu.h -- the C interface of Tileplan's Gemmini emulator (libgemmini_emu.so, gemmini_emu.c).
 *
 * A program calls the Gemmini API of gemmini.h; the emulator runs those calls while it is the current one:
 * inside emu_run_entry(e, entry, args), which calls entry(args) and turns a trap (an instruction the
 * hardware would not execute correctly) into a non-zero return and emu_trap_message().  Timing state
 * persists across emu_run_entry calls until emu_reset, so a run may be split over several entries.
 * DRAM buffers a program touches must be registered with emu_add_region first.
 *
 * Tileplan's Python wrapper (tileplan.codegen.emulator) mirrors these structs field for field.
 */
#ifndef TILEPLAN_GEMMINI_EMU_H
#define TILEPLAN_GEMMINI_EMU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMU_OP_COUNT 12 /* config_ex, config_ld, config_st, mvin, mvin2, mvin3, mvout, preload,
                           compute_preloaded, compute_accumulated, fence, flush */

typedef struct {
  double dram_bytes_per_cycle;  /* effective DRAM bandwidth (bytes/cycle)              */
  double dma_request_bytes;     /* longest single DMA request                          */
  double dma_request_cycles;    /* DMA occupancy per request, on top of its bytes      */
  double dma_latency;           /* cycles from the end of a transfer to data available */
  double issue_cycles;          /* per-instruction dispatch cost on the host           */
  double config_cycles;         /* config_ld / config_st / flush in their unit         */
  double call_cycles;           /* config_ex: per-call cost on execute unit and DMA    */
  double preload_cycles;        /* preload of a weight block                           */
  double compute_row_cycles;    /* per row of A streamed through the array             */
  double compute_op_cycles;     /* per compute instruction                             */
  double compute_latency;       /* extra cycles until a compute's results are ready    */
  double overlap_loss;          /* DMA / array contention while both are busy          */
  double queue_load;            /* reservation-station entries (0 = unbounded)         */
  double queue_exec;
  double queue_store;
  double call_floor_cycles;     /* the host issues at most one call per this many cycles */
  double run_cycles;            /* once per program: first-load / last-store latency, fence */
} emu_timing_t;

typedef struct {
  double cycles;
  uint64_t instructions;
  uint64_t counts[EMU_OP_COUNT];
  uint64_t dram_bytes_in;
  uint64_t dram_bytes_out;
  uint64_t macs;
  double busy[3]; /* load, execute, store unit busy cycles */
} emu_stats_t;

typedef struct emu emu_t;
typedef void (*emu_entry_t)(void **args);

emu_t *emu_create(uint32_t dim, uint32_t spad_rows, uint32_t acc_rows, uint32_t max_mvin_blocks,
                  const emu_timing_t *timing);
void emu_destroy(emu_t *e);
void emu_reset(emu_t *e);
int emu_add_region(emu_t *e, void *base, uint64_t size, int writable);
int emu_run_entry(emu_t *e, emu_entry_t entry, void **args);
void emu_get_stats(const emu_t *e, emu_stats_t *out);
const char *emu_trap_message(const emu_t *e);
int64_t emu_trap_index(const emu_t *e);
int emu_trap_op(const emu_t *e);
const char *emu_op_name(int op);
int emu_op_count(void);

#ifdef __cplusplus
}
#endif

#endif /* TILEPLAN_GEMMINI_EMU_H */
