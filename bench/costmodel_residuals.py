"""Where the Gemmini cost model misses on the 16x16 FireSim runs, held out: residuals by feature.

    PYTHONPATH=service python bench/costmodel_residuals.py [--out bench/results/costmodel_residuals.md]

Every 16x16 run (DOSA mappings and the library's own tiles) is predicted by fits that did not see it: leave one
configuration out and leave one network out, every fold refitting every parameter (the random-mapping set in
every fit), as bench/costmodel.py does. The residual log(predicted / measured) is then grouped by what the model
reads of the run: the narrowest DRAM row its DMA moves, the bytes per DMA request, the accumulator's rows, the
stride, the calls, the tensors larger than the L2, the share the model gives the DMA. A group whose mean residual
sits far from 0 on both splits names a mechanism the model lacks; one with a large spread but no bias does not.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tileplan.cost.calibrate import Dataset, artifact_dataset, cross_validate, fit, random_mapping_dataset
from tileplan.cost.firesim import FireSimRun
from tileplan.cost.gemmini import FEATURE_COLUMNS, _beyond_l2, cycles_from_calls, execution_from_mapping
from tileplan.cost.params import DEFAULT_PARAMS

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT / "bench" / "data" / "firesim" / "gemmini_firesim_random_mappings.csv"
DEFAULT_ARTIFACT = ROOT / "bench" / "data" / "dosa_artifact"


# What the tables below say, and the terms tried against them (not kept). The variants were measured on scratch
# copies of the model with the same cross-validation as this bench (both data sets in every fit, 12 configuration
# folds and 4 network folds, every parameter refitted; the full fit from the shipped parameters with 2 restarts);
# the figures are DOSA-mapping MAPE / Spearman and library MAPE of the 16x16 runs, held out.
FINDINGS = [
    "## Reading",
    "",
    "- **Rows under 4 bytes** (U-Net's 1-channel input at 570x570 and its 2-channel head at 388x388: 9 mapping and 9 "
    "library runs) are the largest misses (bias -0.8 and -0.3). All are U-Net's, so with U-Net held out no other "
    "network pins a term for them, and the 128x128 random set disagrees with itself there (C1_K16_P480_Q48 is "
    "over-predicted, +0.44; C256_K1_P1_Q1 under-predicted, -0.68; bench/results/costmodel.md).",
    "- **Library runs whose weights exceed the L2 and move in strided rows** (54 conv and 12 matmul runs of "
    "ResNet-50, RetinaNet, U-Net and BERT) are short by -0.19 / -0.16, DOSA's mappings of the same kind by only "
    "-0.07: the measured excess is 2-10 cycles per request the model already marks as served by DRAM. The same "
    "library tile of one layer also measures up to 1.3x apart on configurations that differ only in buffer sizes "
    "(e.g. C2048_K512_P7: 16 calls of one tile), which no term of the call can follow.",
    "- **Accumulator rows**: no trend (mapping runs: +0.16 on the 384-row configuration, 5 BERT runs, -0.09 on "
    "2000-3000 rows, -0.03 above 3000).",
    "",
    "Terms tried (not kept; each needed both held-out splits to improve):",
    "",
    "| term (one fitted parameter each) | fitted | by configuration | by network |",
    "|---|---:|---|---|",
    "| none (this model) | | 11.56% / 0.9932, library 14.25% | 11.56% / 0.9937, library 14.20% |",
    "| every byte moved on a tensor larger than the L2 pays extra cycles (DRAM slower than the L2) | 0.032 cycles/B |"
    " 11.99% / 0.9936, library 13.98% | 12.46% / 0.9936, library 13.96% |",
    "| a strided request on a tensor larger than the L2, in a call touching more 64-byte blocks than the L2 holds, "
    "refetches its block from DRAM | 9.1 cycles | 11.35% / 0.9937, library 14.26% | 11.55% / 0.9936, library 14.21% |",
    "| the same when the calls between two tiles of the channel loop touch more blocks than the L2 holds "
    "(reuse distance) | 0 | unchanged | unchanged |",
    "| a request of a row narrower than one 16-byte bus beat pays extra cycles | 0 | unchanged | unchanged |",
    "| every request on a tensor larger than the L2 holds one of the DMA's 16 slots for DRAM's latency (a call's DMA "
    "time at least those requests x a fitted slot time) | 0.45 cycles (never binds) | unchanged | unchanged |",
    "",
    "Second round (issue 25): eleven variants, measured the same way but with one fit per fold from the shipped parameters (no restarts); Spearman "
    "to five digits, since the rule is that MAPE and Spearman of both splits and the library's MAPE all improve. None "
    "passed, so the model is unchanged:",
    "",
    "| term (one fitted parameter each) | fitted | by configuration | by network |",
    "|---|---:|---|---|",
    "| none (this model) | | 11.56% / 0.99323, library 14.25% | 11.56% / 0.99365, library 14.20% |",
    "| every 4 KiB page a call's DMA streams touch (input rows, weight rows per kernel position, output rows; a "
    "region of L bytes touches 1 + (L - 1) / 4096) is one translation of Gemmini's 4-entry DMA TLB (`tlb_size = 4`) "
    "| 3.06 cycles / page | 11.57% / 0.9934, library 14.44% | 11.55% / 0.9938, library 14.61% |",
    "| a strided request on a tensor larger than the L2 misses the L2 when the calls between its channel tile and "
    "the neighbouring tile that shares its 64-byte blocks (the loops inside that channel loop) touch more than the L2 "
    "holds; otherwise only the first tile of each block misses (row bytes / 64 of the requests); rows of 64 B or more "
    "always miss | 0.74 cycles / miss | 11.42% / 0.99322, library 14.14% | 11.41% / 0.99374, library 14.10% |",
    "| the same misses as a latency bound: a call's DMA lasts at least its misses x a fitted time (DRAM latency over "
    "the 16 requests in flight) | 1.7 cycles (never binds; started at 15) | unchanged | unchanged |",
    "| the misses above, and DRAM row activations: 8 KiB rows (a DDR3 rank of x8 chips) the DMA streams of tensors "
    "larger than the L2 touch per call | 7.7 cycles / row (dram_request_cycles fits to 0) | 11.38% / 0.99336, "
    "library 14.19% | 11.40% / 0.99379, library 14.20% |",
    "| DRAM row activations alone | 8.4 cycles / row | 11.66% / 0.99333, library 14.34% | 11.69% / 0.99365, "
    "library 14.37% |",
    "| a store request narrower than a 64-byte block on an output larger than the L2 (the L2 fills the block from "
    "DRAM before merging the write), with the misses above | 1.39 cycles | 11.49% / 0.99327, library 14.26% | "
    "11.43% / 0.99363, library 14.23% |",
    "| a constant part of a compute's floor (cycles on top of compute_floor_dims x DIM), with the misses above | "
    "1.9 cycles | 11.39% / 0.99318, library 14.14% | 11.38% / 0.99370, library 14.08% |",
    "| strided convolutions (config_ex's A stride) stream each row slower | 0 | unchanged | unchanged |",
    "| loop_conv_ws hides less of the shorter of DMA and compute when the convolution is strided with a kernel wider "
    "than 1 (its own overlap_loss) | 0.267 (0.231 for the rest) | 11.54% / 0.99331, library 14.23% | 11.53% / "
    "0.99370, library 14.20% |",
    "| the L2 misses above, with random replacement: the neighbouring tile finds a block with probability "
    "exp(-D / 512 KiB), D = the bytes of blocks the calls between them touch (row bytes / 64 of the requests miss "
    "regardless) | 1.02 cycles / miss (dram_request_cycles fits to 0.16) | 11.38% / 0.99328, library 14.12% | "
    "11.38% / 0.99374, library 14.08% |",
    "| the L2 misses above with the 128x128 random-mapping runs read as having no L2 limit (its SoC's L2 is not "
    "published; its C256_K256_P13 runs move 12.5M such requests in 20.7M cycles) | 1.63 cycles / miss | 11.76% / "
    "0.99321, library 13.93% | 11.79% / 0.99360, library 13.77% |",
    "",
    "The random-replacement miss term is the one variant that improves every figure the rule names. It is not "
    "shipped: refitted and run through bench/costmodel.py (restarts, intervals requantiled) it gives 11.4% / 0.9933 "
    "/ library 14.1% by configuration and 11.4% / 0.9937 / 14.1% by network (now 11.6% / 0.9932 / 14.3% and 11.6% / "
    "0.9937 / 14.2%), held-out interval coverage 79.7 / 76.6 / 79.7%, but the 128x128 set held out by layer shape "
    "moves from 16.3% / 0.989 to 16.4% / 0.988, and the emulator has no counterpart: its misses follow from the "
    "whole call sequence, which the per-instruction count does not track, so bench/codegen.py's "
    "conv_256_64_1x1_s1_56 under gemmini-auto drops from emulated = model to 0.901 (16x16) and 0.905 (32x32), still "
    "42 of 42 within 10% but at the edge. Shipping it needs that counterpart in gemmini_emu.c and a rework of "
    "tests/cost/test_costmodel.py::test_restarts_leave_the_local_minimum_the_shipped_parameters_sat_in (its old "
    "local minimum is no longer one: a fit from there reaches 17.05).",
    "",
    "Third round (issue 25, branch cost25c): what the runs were. DOSA's README sends the FireSim experiments to "
    "charleshong3/firesim-dosa; its `deploy/gemmini.py` runs every artifact workload on one FPGA image, "
    "`firesim_rocket_singlecore_16pe4kdummygemmini_nofirstlayer_no_nic_l2_llc4mb_ddr3` (`deploy/built-hwdb-entries/`), "
    "booting `conv_tilings-baremetal` / `matmul_tilings-baremetal` (`deploy/workloads/gemmini_conv.json`), which "
    "gemmini-rocc-tests' `artifact_script.sh` builds from `gemmini-data-collection/templates/conv_tilings.c` "
    "(commit 959b23f). Three consequences (the tables below are of the model with the LLC term shipped here; the two "
    "rounds above measured against the model before it):",
    "",
    "- **No address translation.** The binaries are bare-metal: machine mode, satp Bare. Gemmini's DMA TLB "
    "(FrontendTLB.scala: one shared rocket TLB of `tlb_size = 4` entries behind a one-entry filter register per "
    "client) is rocket-chip's TLB, whose `vm_enabled` is false outside S/U mode with a non-Bare satp: it never "
    "misses and never walks the page table. So a TLB term cannot be physical on these runs, and the per-miss "
    "cost is not fitted (an LRU simulation of a TLB that cannot miss would only be a proxy for page locality). "
    "The second round's page-count proxy fitted 3 cycles per page, not the hundreds a walk would cost, and did not "
    "pass.",
    "- **A 4 MiB LLC behind the 512 KiB L2** (`_l2_llc4mb_ddr3`: FASED's LLC model, `WithLLCModel(4096, 8)` with "
    "blocks of up to 128 B, random replacement, in front of the DDR3 FR-FCFS quad-rank model; "
    "sim/firesim-lib/.../FASEDTargetConfigs.scala). Tensors between the two (e.g. ResNet-50's 2.4 MB 3x3x512x512 "
    "weights) are refetched from the LLC, tensors beyond it (U-Net's 9.4 MB C1024 weights and 20.8 MB C1_K64 "
    "outputs, RetinaNet's 4.7 MB C2048_K256 weights) from DRAM. Term: a strided request on a tensor larger than the "
    "LLC (`llc_bytes`, a hardware fact) waits a fitted `llc_miss_cycles` on top of `dram_request_cycles` (`far_req`). "
    "One fit per fold from the shipped parameters (the second round's protocol; none (this model) as above): "
    "10.71% / 0.99423, library 13.77% by configuration and 10.79% / 0.99466, library 14.06% by network, "
    "`llc_miss_cycles` 7.3 and `dram_request_cycles` 0.90: every figure the rule names improves, so it is shipped "
    "(model, emulator: gemmini_emu.c's `far_req` / `llc_miss_cycles`, catalog, calibration; bench/costmodel.py's "
    "full refit: 10.7% / 0.9942 / library 13.8% by configuration, 10.8% / 0.9947 / 14.1% by network, the 128x128 set "
    "held out by layer shape 16.0% / 0.991, was 16.3% / 0.989; bench/codegen.py 42 of 42 within 10%). Moving the "
    "single threshold from 512 KiB to 4 MiB instead (one term) gives 11.23% / 0.99370, library 14.16% by "
    "configuration but 11.43% / 0.99452, library 14.35% by network (was 14.20%): not kept. Charging the LLC miss to "
    "every request on a tensor beyond the LLC, whole contiguous rows too (U-Net's 9.7 MB input of the 2-channel "
    "head streams whole 64-channel rows), gives 10.70% / 0.99424, library 13.40% by configuration but 11.12% / "
    "0.99469, library 14.03% by network (mapping MAPE worse than the strided-only term's 10.79%): not kept.",
    "- **One chip for all twelve configurations.** The image is a 'dummy' Gemmini (DummySInt data, sized for the "
    "largest buffers); the twelve configurations are buffer sizes the software is compiled for, not twelve pieces "
    "of hardware. So the configuration-wide offsets below (identical calls up to 1.56x apart across files) are not a "
    "physical difference the model ignores (L2, channels, DMA width are all the same); they come from the runs' "
    "context: each network's layers run back to back in one binary on the same static buffers "
    "(`input[1][40][40][2048]`, `weights_mat[2048][2048]`, `output_mat[11000][2048]`), each layer's DOSA mapping "
    "right after the library's own run of it, so what the L2 and the randomly replaced LLC hold, and DRAM's open "
    "rows, at a run's start depend on what ran before in that file. No per-configuration term is physical.",
    "",
    "What the second round found in the data (bench/costmodel.md's worst runs; cycles per DMA request = measured "
    "cycles over the requests the model counts):",
    "",
    "- **The same library tile measures up to 1.56x apart across configuration files**, further than the 1.3x above: "
    "C256_K512_P28 stride 2 under tiled_conv_auto (channel tile 64, 16 output channels, 512 calls) takes 2,452,866 "
    "cycles on gemmini-16x16-acc512x16-spad130048 and 3,803,411 on gemmini-16x16-acc1792x16-spad217088; "
    "C512_K1024_P14 stride 2 (160 x 32, 128 calls) 1,272,647 against 1,910,279 and 1,989,437. Buffer sizes do not "
    "enter such a call; the files come from different upstream commits (bench/data/dosa_artifact/README.md). Over "
    "all runs such spreads put a floor of 4.2% under the library's MAPE and 1.0% under the mappings' (table below), "
    "and the worst over-prediction of bench/results/costmodel.md (1.74x) is one of them: C1024_K256_P14 under one "
    "DOSA mapping measures 281,428 cycles on the 512-row configuration and 518,207 on a 1792-row one. The offsets "
    "are configuration-wide (identical calls run about 9% faster on gemmini-16x16-acc512x16-spad130048 and 8% slower on "
    "gemmini-16x16-acc1792x16-spad217088 than their twins) and follow neither buffer size.",
    "- **Runs that move strided weight rows beyond the L2 measure 8 to 20 cycles per request depending on the tile**: "
    "U-Net's C1024_K1024_P28 under DOSA's mappings, 16 output channels a call (16-byte weight rows 1 KiB apart), "
    "measures 20.5 cycles per request with a 4 x 28 pixel tile and the whole 3x3x1024 kernel slice in each call (448 "
    "calls, predicted 0.32x held out), 16.7 with a 14 x 4 tile (896 calls, 0.41x) and 7.8 with 4 x 28 pixels and 1x1 "
    "kernel tiles of 512 channels (8,064 calls, 0.85x). The terms above that follow where the L2 still "
    "holds a block (reuse distance) or how many pages or DRAM rows a call opens fit to a few cycles, because most "
    "other runs with many such requests measure near the model.",
    "- **Library tiles whose channel tile is not a multiple of DIM** (tiled_conv_auto's 120 and 105 of 256-2048 "
    "channels: 18 runs) are short by -0.31 / -0.32 (mean log, held out by configuration / network; tables below), "
    "and its stride-2 3x3 runs by -0.32 (15 runs) against -0.08 for DOSA's mappings of the same layers; the worst, "
    "C2048_K256_P4 stride 2 (120 x 112 tiles, 54 calls), takes 36-41k cycles per call, 70-80 per weight block of its "
    "504 (9 kernel positions x 8 x 7 blocks). A slower strided compute (above) fits to 0; the 128x128 set's stride-2 3x3 layers are within -0.12.",
    "- **U-Net's 1-channel 3x3 layer (C1_K64_P570)** measures 19.5M cycles when a call writes all 64 output channels "
    "of its pixels, 35-44M when it writes 32 (the other half of each output block written a whole image of calls "
    "later) and 29.5M under the library's 16-channel tiles (four consecutive calls per block); the model gives "
    "13-16M to all three. The write-allocate fill above does not follow it held out.",
    "",
    "Fourth round (issue 25, branch cost25d): DRAM's own rate beyond the LLC. U-Net's 2-channel head reads its 9.6 MB "
    "input in whole 64-channel rows (64-byte requests, no strided row, so neither `dram_req` nor `far_req` counts "
    "them) and measures 3.8M cycles under DOSA's 2 x 388 tiles and 5.1-5.4M under the library's 22 x 23: 2.5 B/cycle "
    "at best, against the DMA's ~11. The 1-channel 3x3 layer (C1_K64_P570) writes 20.8 MB: 19.5M cycles when each call "
    "stores all 64 channels of its pixels (each 64-byte block filled and written back once), 35-44M when DOSA's "
    "mappings store 32 at a time with the channel loop outermost (each block twice, a whole image apart), 29.5M "
    "under the library's 16-channel tiles with the channel loop inside the pixel loops (the three later calls find "
    "the block in the L2). Term: a call's DMA lasts at least the bytes DRAM moves for it x a fitted "
    "`dram_byte_cycles` (`far_bytes`; what the previous call left in the L2 is not counted). Measured with one fit "
    "per fold from the shipped parameters (the second round's protocol; the start of the new parameter in brackets; "
    "the last four rows from the parameters the loads-and-stores variant fitted):",
    "",
    "| variant | fitted | by configuration | by network |",
    "|---|---:|---|---|",
    "| none (the LLC model above) | | 10.71% / 0.99423, library 13.77%, 0.42x-1.72x | 10.79% / 0.99466, library "
    "14.06%, 0.36x-1.68x |",
    "| every byte on a tensor beyond the LLC (loads and stores, whole rows too) pays extra cycles, added (from 0) | "
    "0.027 cycles/B | 10.69% / 0.99418, library 13.77% | 10.74% / 0.99463, library 14.05% |",
    "| a bound (DMA at least far bytes x the parameter), stores counted as a fill and a write-back per block, no L2 "
    "between calls (from 0.4) | 0.16 | 10.67% / 0.99420, library 13.16% | 11.85% / 0.99490, library 17.69%, up to 1.96x "
    "(with U-Net held out the 128x128 set's 16-37 MB weight matrices fit it higher, and U-Net's library runs, whose "
    "channel tiles reread a pixel tile's input four calls running, go over) |",
    "| the bound, a tile the previous call moved (same tile) is in the L2 (from 0.4) | 0.27 | 10.52% / 0.99454, "
    "library 13.40% | 10.73% / 0.99529, library 14.10% |",
    "| the same, and a kernel-row or -column tile only shifts the input window, with the stores' fills and "
    "write-backs (a pixel's blocks fill once when consecutive calls store its channel tiles) (from 0.4) | 0.28 | "
    "10.18% / 0.99502, library 13.40%, 0.50x-1.70x | 10.42% / 0.99534, library 14.07%, 0.55x-1.66x |",
    "| the same from its own fit (0.28; bench/costmodel.py's full refit from there: by network 10.8% / 0.9945, "
    "library 14.1%, 0.36x: with U-Net held out the parameter fits to ~0.01, no other network pins it) | 0.28 | "
    "10.18% / 0.99495, library 13.41%, 0.50x-1.70x | 10.82% / 0.99447, library 14.08%, 0.36x-1.66x |",
    "| stores' fills and write-backs only | 0.37 | 10.38% / 0.99519, library 13.67%, 0.46x-1.71x | 10.60% / "
    "0.99564, library 14.23% (library worse) |",
    "| **loads only (shipped: every figure of both splits improves)** | 0.29 | **10.25% / 0.99434, library 13.31%, "
    "0.42x-1.71x** | **10.72% / 0.99467, library 13.98%, 0.36x-1.67x** |",
    "| loads and stores, and a strided load row narrower than a 64-byte block moves its whole block from DRAM "
    "(from 0.28) | "
    "0.22 | 10.47% / 0.99411, library 13.30% | 10.68% / 0.99470, library 13.74% (mappings worse: not kept) |",
    "",
    "Not modelled, seen on the way: the library's runs were built from the `dosa` branch of gemmini-rocc-tests "
    "(`tiled_conv(..., perm)`, loop order \"CRSKPQN\": channels innermost, then kernel columns, kernel rows, output "
    "channels, output columns, rows, batch), whose `tiled_conv` reloads every tile; gemmini.h on `dev` (180c468) keeps "
    "an operand in the scratchpad when it has at most two tiles (`a_reuse` / `b_reuse`, bd7de20, May 2023), which "
    "these runs do not have. RetinaNet's C256_K256_P2 3x3 under the library's 112 x 128 tiles measures 152-160k "
    "cycles at stride 2 and 78-92k at stride 1, 6 calls of the same weight traffic each; the model gives both "
    "~105-113k and no term of the call separates them.",
    "",
    "Fifth round (issue 25, branch cost25e), with one fit per fold from the shipped parameters (the second round's "
    "protocol; cells: DOSA-mapping MAPE / Spearman, library MAPE, predicted / measured range of all 16x16 runs):",
    "",
    "| variant | fitted | by configuration | by network |",
    "|---|---:|---|---|",
    "| none (the far-DRAM model, both sets weighted equally) | | 10.24% / 0.99434, library 13.30%, 0.42x-1.71x | "
    "10.72% / 0.99467, library 13.98%, 0.36x-1.67x |",
    "| the library's run touches its weights first (below): each weight tile's first load (the first pixel tile) "
    "pays extra cycles per byte | 0.048 cycles/B | 10.12% / 0.99466, library 12.83%, 0.41x-1.75x | 10.51% / "
    "0.99498, library 14.69%, 0.40x-2.11x |",
    "| the same with the input tiles' first loads (the first output-channel and kernel tile) | 0.043 cycles/B | "
    "10.12% / 0.99455, library 12.81%, 0.41x-1.70x | 10.24% / 0.99498, library 14.38%, 0.42x-2.06x |",
    "| the weights' first loads at DRAM's own rate instead (added to `far_bytes`, no new parameter) | | 10.48% / "
    "0.99458, library 13.75% | 10.48% / 0.99520, library 17.20%, up to 2.37x |",
    "| a matmul run's own fixed cost (run_overhead_cycles for tiled_matmul apart: BERT's 128 x 64 x 128 matmuls "
    "are 1.15-1.26x over under both kinds) | 772 (conv 798) | 10.43% / 0.99437, library 13.34% | 14.31% / "
    "0.99472, library 14.78% (the RetinaNet fold lands elsewhere: its 1x1 convs up to 2.16x) |",
    "| the 16x16 set carries 60% of the loss (the 128x128 set 40%) | | 10.20% / 0.99421, library 13.28%, "
    "0.42x-1.71x | 10.24% / 0.99482, library 13.59%, 0.43x-1.65x |",
    "| 70% | | 10.15% / 0.99416, library 13.27%, 0.42x-1.70x | 10.18% / 0.99470, library 13.60%, 0.43x-1.63x |",
    "| 85% | | 10.13% / 0.99394, library 13.24%, 0.41x-1.69x | 10.21% / 0.99461, library 13.76%, 0.43x-1.59x |",
    "| 70%, with the input and weight first loads above | 0.046 cycles/B | 10.00% / 0.99448, library 12.70%, "
    "0.40x-1.72x | 10.12% / 0.99506, library 14.16%, 0.41x-2.07x |",
    "| 70%, with the fourth round's stores: a fill and a write-back of every 64-byte block a store touches on an "
    "output beyond the LLC, in `far_bytes` (a pixel's blocks fill once when consecutive calls store its channel "
    "tiles) | | 10.06% / 0.99482, library 13.33%, 0.49x-1.69x | 10.30% / 0.99542, library 14.06%, 0.56x-1.63x |",
    "",
    "Nothing here is shipped. The loss weighting (the 16x16 set's share of the fit; the sets are weighted equally "
    "now) improves both splits' mapping and library MAPE without a worse row, but Spearman held out by "
    "configuration drops (0.99434 to 0.99416), and through bench/costmodel.py (restarts, folds from the full fit) "
    "70% gives by configuration 10.2% / 0.9942, library 13.3%, 0.42x-1.70x (now 10.2% / 0.9943, 13.3%, 0.42x-1.71x), "
    "by network 10.2% / 0.9947, library 13.6%, 0.43x-1.63x (now 10.3% / 0.9948, 13.6%, 0.43x-1.67x), the 128x128 "
    "set by layer shape 15.8% (now 15.7%), fitted on 128x128 only 11.2% (now 10.9%): within refit noise, and Spearman "
    "lower on both splits. The first-touch terms improve the split by configuration and fail the one by network "
    "(below). The store fills give the best worst rows (U-Net's C1_K64_P570 from 0.42x to 0.49x by configuration, "
    "0.56x by network) and Spearman, but the library by network goes from 13.60% to 14.06%, and the emulator would "
    "need the same fills.",
    "",
    "Why the library's runs come first: conv_tilings.c at the bert files' commit (928aba8) runs, per layer, "
    "`gemmini_flush(0)`, `tiled_conv_auto` (the library's run, timed with no fence before its closing "
    "`read_cycles`), then the mapping's `tiled_conv`, on the same static buffers (`input`, `weights_mat`, "
    "`output_mat`) for every layer of the file. So the mapping's run finds a layer's weights where the library's run "
    "left them (in the LLC when they fit), and the library's run finds whatever the previous layer's runs left at "
    "the same addresses. With the shipped parameters, library runs whose weights exceed the L2 are short by -0.11 "
    "(mean log(predicted / measured) in-sample; 87 runs with weights within the LLC, 12 beyond it) where DOSA's "
    "mappings of the same layers are at -0.00 and -0.04, and the "
    "ResNet-50 classifier (2 MB of weights read once) measures 511k cycles under the library's 896 x 128 tiles on "
    "three configurations against 301-321k under DOSA's. A first-touch term fitted on all runs charges every "
    "library run alike, and RetinaNet's C256_K256_P2 3x3 at stride 1 (already 1.33x over) goes to 2.07x with "
    "RetinaNet held out: in the file it runs two layers after the stride-2 layer of the same weight shape (only a "
    "64 KB 1x1 layer between), which fits the fourth round's unexplained pair (78-92k cycles at stride 1, 152-160k "
    "at stride 2, the same weight traffic). But the previous layer's footprint does not separate the library's "
    "runs in general: those with weights beyond the L2 are short by -0.15 (mean log, in-sample and held out by "
    "configuration alike) when the previous layer's weights (within the LLC, the same buffer) cover theirs (15 runs) "
    "and by -0.10 when they do not (81 runs); within the L2, +0.00 and +0.01. So the history of the file is not "
    "shown to be the mechanism either, and a request to POST /evaluate would not carry it.",
    "",
    "Sixth round (issue 25, branch cost25f): loads and stores beyond the LLC are different requests. Of `far_req`, "
    "the strided requests on tensors larger than the LLC, the stores (`far_st_req`) are puts that write part of a "
    "64-byte block the L2 does not hold: the L2 fetches the block from DRAM before merging the put and writes it "
    "back dirty later, a round trip a load does not make; the loads are DRAM reads, of which Gemmini's DMA keeps at "
    "most 16 in flight (`max_in_flight_mem_reqs = 16`, gemmini.md; each holds a TileLink source id until its data "
    "returns), so a call's strided loads there cannot go faster than DRAM's round trip / 16 each. U-Net's C1_K64_P570 "
    "(20.8 MB of outputs, loads within the L2) is all far stores: 19.5M cycles when a call writes all 64 channels of "
    "its pixels (whole rows, no strided store), 35-44M when it writes 32 a call; C1024_K1024_P28 (9.4 MB of weights "
    "read in 16-byte rows) all far loads: 20.5 cycles per request with the whole kernel slice in a call, 7.8 with 1x1 "
    "kernel tiles of 512 channels that move fewer of them. Measured with one fit per fold from the shipped "
    "parameters (the second round's protocol; cells: DOSA-mapping MAPE / Spearman, library MAPE, predicted / "
    "measured range of all 16x16 runs):",
    "",
    "| variant | fitted | by configuration | by network |",
    "|---|---:|---|---|",
    "| none (the far-DRAM model) | | 10.24% / 0.99427, library 13.30%, 0.40x-1.71x | 10.38% / 0.99471, library 13.69%, "
    "0.41x-1.67x |",
    "| C: a strided store beyond the LLC waits its own `llc_store_miss_cycles` (loads keep `llc_miss_cycles`) | 16.3 "
    "(loads 7.4) | 9.90% / 0.99536, library 13.10%, 0.50x-1.71x | 10.00% / 0.99583, library 13.54%, 0.56x-1.67x |",
    "| E: a call's DMA lasts at least its strided loads beyond the LLC x `far_load_cycles` (16 reads in flight) | "
    "12.6 | 10.15% / 0.99441, library 13.08%, 0.41x-1.72x | 10.15% / 0.99491, library 13.08%, 0.41x-1.67x |",
    "| **C and E (the candidate)** | 16.6, 12.8 | **9.82% / 0.99556, library 12.64%, 0.52x-1.71x** | **9.97% / 0.99593, "
    "library 13.32%, 0.55x-1.67x** (a second run, rows merged differently: 9.88% / 0.99593, 13.10%) |",
    "| F: a write-allocate fill per 64-byte block a call's stores touch on an output beyond the LLC (a pixel's blocks "
    "fill once when consecutive calls store its channel tiles), added | 22.3 | 9.94% / 0.99539, library 13.25%, "
    "0.50x-1.70x | 10.17% / 0.99586, library 13.74% (worse), 0.56x-1.66x |",
    "| F and C | 13.2, 12.5 | 9.88% / 0.99539, library 13.12% | 10.49% / 0.99584, library 14.00%, down to 0.36x |",
    "| F, C and E | 5.4, 15.0, 12.8 | 9.79% / 0.99558, library 12.65%, 0.52x-1.71x | 9.99% / 0.99599, library 13.32%, "
    "0.55x-1.67x (no better than C and E) |",
    "| C and E, and the LLC-served strided loads (beyond the L2, within the LLC) in the same in-flight bound at their "
    "own fitted round trip | | not measured: its fit had not converged after 25 minutes on the shared machine "
    "(stopped) | |",
    "",
    "Nothing here is shipped. Through bench/costmodel.py (restarts, every fold starting from the full fit) C and E "
    "give by configuration 9.8% / 0.9956, library 12.6%, 0.52x-1.71x (now 10.2% / 0.9943, 13.3%, 0.42x-1.71x), but "
    "by network 19.3% / 0.9907, library 34.0%, up to 4.74x, and fitted on the 128x128 set only 13.8% / 0.9943, "
    "library 21.7%, up to 2.81x (now 10.9%, 14.0%, 1.75x): the U-Net fold's mappings at 41.5%, its library runs at "
    "79.8%. The full fit itself is fine (in-sample 9.3% / 0.996, library 12.1%; `llc_miss_cycles` 1.7, "
    "`llc_store_miss_cycles` 16.6, `far_load_cycles` 12.8; the 128x128 set held out by layer shape 15.8% / 0.991, "
    "interval coverage held out by configuration 83.6%, by network 72.5%). Both terms are pinned by U-Net's rows "
    "alone: U-Net's C1_K64_P570 holds every strided store beyond the LLC of the 16x16 set, and the 128x128 set does "
    "not pin either parameter. With U-Net held out, `llc_store_miss_cycles` fits to 0.86 from the full fit's "
    "parameters and to 68.5 from the shipped ones (U-Net fold 13.0% against 39.9% MAPE, up to 1.54x against 3.35x); "
    "`far_load_cycles` (stores charged as loads) to 2.2 from a start of 1 and 10.9 from 30 (the U-Net fold 13.7% and "
    "13.2% either way), and fitted on the 128x128 set only to 1.2 from 1 (16x16 mappings 10.9%, library 14.0%) and "
    "12.7 from 30 (12.0%, 14.9%, up to 2.02x). The one-fit-per-fold protocol above starts each fold from the "
    "shipped parameters, where these two sit at the full fit's values: a fold without U-Net keeps them, so its "
    "figures carry U-Net's information. Both mechanisms fit U-Net's two worst layers with physical values (a DRAM "
    "round trip of ~200 cycles over 16 reads in flight; a store ~2x a load's wait, a fill plus a write-back), but "
    "the data have no second network to test them on.",
    "",
    "The store's two DRAM transfers need no parameter of their own: a strided store request beyond the LLC counted "
    "twice in `far_req` (the L2 is write-back and write-allocate, so the fill and the write-back are each a DRAM "
    "transfer of the block, where a strided load is one), at the loads' `llc_miss_cycles`, which the other networks' "
    "and the 128x128 set's loads beyond the LLC pin (fitted on the 128x128 set alone: 9.8 with the term and without "
    "it). A fit from the shipped parameters, every fold from it, no restarts: by configuration 9.92% / 0.99539, "
    "library 13.07%, 0.52x-1.71x (without: 10.23% / 0.99434, 13.30%, 0.42x-1.71x), by network 10.00% / 0.99592, "
    "library 13.52%, 0.56x-1.67x (10.53% / 0.99473, 13.78%, 0.43x-1.67x), fitted on the 128x128 set only 10.66% / "
    "0.99606, library 14.26%, 0.57x-1.75x (11.01% / 0.99491, 14.08%, 0.48x-1.75x). Through bench/costmodel.py "
    "(restarts, folds from the full fit), twice: from the shipped parameters, by configuration 9.9% / 0.9953, library "
    "13.1%, 0.52x-1.71x, by network 10.0% / 0.9959, 13.5%, 0.56x-1.67x, fitted on the 128x128 set only 10.7% / "
    "0.9961, 14.2%, 0.57x-1.78x, nested interval coverage 82.0 / 80.6 / 82.9%; again from that fit (the same "
    "parameters to four digits but call_overhead_cycles, 0.0007 against 1e-10), by configuration 9.9% / 0.9954, "
    "13.1%, 0.52x-1.71x, by network 10.4% / 0.9958, 13.9%, 0.36x-1.67x, fitted on the 128x128 set only 11.0% / "
    "0.9960, 14.6%, 0.41x-1.75x, coverage 82.2 / 79.1 / 82.9% (the model as shipped: 10.2% / 0.9943, 13.3%, "
    "0.42x-1.71x; 10.3% / 0.9948, 13.6%, 0.43x-1.67x; 10.9% / 0.9949, 14.0%, 0.48x-1.75x; the 128x128 set by layer "
    "shape 15.7% / 0.991 in all three; predicted from the 16x16 set alone 26.5%, with the term 29.7% and 37.8%). The "
    "U-Net fold decides the split by network, and it is flat in `dram_byte_cycles` (no other network pins it): a "
    "start that differs in the fourth digit moves U-Net's rows from 0.56x to 0.36x. By configuration the term helps "
    "every time; by network it helps in one bench run and not in the other, so it is not shipped.",
    "",
    "Seventh round (issue 25, branch cost25g). Screening protocol: bench/costmodel.py's own (a full fit with four "
    "restarts from the shipped parameters, every fold started from it, every parameter refitted; the harness "
    "applies it to both 16x16 splits only, 75-170 s a variant). Cells: DOSA-mapping MAPE / Spearman, library MAPE, "
    "predicted / measured range of all 16x16 runs.",
    "",
    "**The U-Net fold first.** With U-Net held out, `dram_byte_cycles` is not identified: fitted from starts of "
    "0.01, 0.05, 0.1, 0.2, 0.2931, 0.4 and 0.8 (every other parameter at the shipped values) it lands at 0.23, "
    "0.14, 0.22, 0.09, 0.09, 0.27 and 0.21, every time at the same loss (14.5109), and U-Net's held-out mappings at"
    " 12.9%, 13.7%, 13.1%, 13.8%, 13.8%, 12.6% and 13.1% MAPE (library 13.9-15.1%, worst 0.36x-0.43x). A lower "
    "bound from gemmini.md's fastest measured FireSim DRAM rate (8 B/cycle, `dram_byte_cycles` >= 0.125) does not "
    "pin it (the flat range reaches 0.27): 10.24% / 0.99434, library 13.31% by configuration, 10.30% / 0.99483, "
    "13.59% by network, as without it. A weak prior does: one extra residual 0.01 x log(`dram_byte_cycles` / 0.151)"
    " (`calibrate.PRIORS`; 0.151 cycles/B = the geometric mean of gemmini.md's measured 5.5-8 B/cycle): every start"
    " above lands at 0.1508, U-Net's mappings at 13.6%, library 14.9%; the full fit moves by 0.0002 (0.2933). The "
    "model as it was, with the prior: by configuration 10.23% / 0.99434, library 13.30%, 0.42x-1.71x (unchanged), "
    "by network 10.65% / 0.99473, library 13.91%, 0.41x-1.67x (was 10.31% / 0.99483, 13.59%, 0.43x-1.67x): about a "
    "third of a point of the split by network was where the U-Net fold's start happened to leave the parameter. The"
    " prior is shipped; the mechanisms below are compared with it on and off.",
    "",
    "| variant (no new fitted parameter in any) | by configuration | by network |",
    "|---|---|---|",
    "| none (the model as it was) | 10.23% / 0.99434, library 13.30%, 0.42x-1.71x | 10.31% / 0.99483, library "
    "13.59%, 0.43x-1.67x |",
    "| a DMA request occupies the bus for at least one 16-byte beat (per operand, bytes = max(data, 16 x requests):"
    " 1- and 2-byte rows of U-Net's C1 input and 2-channel head) | 10.53% / 0.99397, library 13.64%, 0.43x-1.54x | "
    "10.69% / 0.99443, library 14.06%, 0.43x-1.55x (worse) |",
    "| every strided request beyond the L2 (`dram_req`) brings its 64-byte block over the 8-byte memory bus: a "
    "call's DMA at least `dram_req` x 8 cycles | 11.70% / 0.99054, library 13.41%, 0.41x-1.87x | 12.32% / 0.99048, "
    "library 14.06%, 0.33x-1.87x (worse: the L2 serves many of them) |",
    "| the same bound on the strided requests DRAM serves only (`far_req` x 8) | unchanged (never binds) | "
    "unchanged |",
    "| **the same, a strided store's block counted twice (the L2 fills it and writes it back): (`far_req` + "
    "`far_st_req`) x 8 (shipped)** | **10.11% / 0.99451, library 13.04%, 0.50x-1.71x** | **10.20% / 0.99501, "
    "library 13.44%, 0.54x-1.67x** |",
    "| requests in flight: a DRAM request holds one of the DMA's 16 slots for DRAM's round trip, so a strided load "
    "DRAM serves costs what 64 bytes of whole rows do: DMA at least `dram_byte_cycles` x max(`far_bytes`, 64 x "
    "strided loads beyond the LLC, less what the previous call left in the L2) | 10.52% / 0.99427, library 13.43%, "
    "0.39x-1.72x | 10.62% / 0.99474, library 13.61%, 0.42x-1.68x (pins `dram_byte_cycles` in every fold, 0.20-0.23,"
    " but worse) |",
    "| with the prior: none | 10.23% / 0.99434, library 13.30%, 0.42x-1.71x | 10.65% / 0.99473, library 13.91%, "
    "0.41x-1.67x |",
    "| **with the prior: the stores-twice bound (shipped)** | **10.11% / 0.99451, library 13.04%, 0.50x-1.71x** | "
    "**10.54% / 0.99494, library 13.76%, 0.41x-1.67x** |",
    "| with the prior: the stores-twice bound on every strided store beyond the L2 (the L2 fills its block from the"
    " LLC and writes it back: 16 cycles), loads only when DRAM serves them | 10.30% / 0.99416, library 13.58%, "
    "0.50x-1.80x | 10.84% / 0.99427, library 14.09%, 0.33x-1.79x (worse than the shipped bound) |",
    "",
    "The stores-twice bound improves every MAPE and Spearman of both splits, with the prior and without, worsens no "
    "worst ratio, and has nothing to "
    "fit, so no fold can tune it to U-Net (the sixth round's C and E could). The 8-byte bus is rocket-chip's "
    "(`MemoryBusParams(beatBytes = XLen / 8)` in its base subsystem configuration; FireSim's Rocket is RV64). It "
    "binds where the strided stores of a call to a tensor beyond the LLC dominate its DMA: U-Net's C1_K64_P570 "
    "under DOSA's 32-channel stores (0.42x to 0.50-0.54x held out). Shipped in the model (`far_st_req`, "
    "`refill_cycles`, `CostParams.mem_bus_bytes`), the emulator (gemmini_emu.c: `refill_cycles`, a 12th call "
    "feature) and `timing_for`; bench/fusion_bound.py's free-DRAM copy now frees it and `dram_byte_cycles` too (it "
    "left the latter at its fitted value).",
    "",
    "Accumulator-limited tilings: BERT's DOSA mappings on the 384-row configuration are over-predicted, not short "
    "(shipped parameters before this round: C768_K768 1.28x, 144 calls, 110,592 load requests, the model's DMA 631k"
    " cycles against 304k of compute, measured 495k in all; C3072_K768 1.34x, 576 calls): the DMA of these "
    "small-tile calls runs faster than the fitted rate. No term was tried in the time left.",
    "",
    "Through bench/costmodel.py (four restarts from the previous shipped parameters, every fold from that fit; the "
    "shipped parameters are its result): by configuration 10.1% / 0.9945, library 13.0%, 0.50x-1.71x (before this "
    "round 10.2% / 0.9943, 13.3%, 0.42x-1.71x); by network 10.5% / 0.9949, library 13.8%, 0.41x-1.67x (10.3% / "
    "0.9948, 13.6%, 0.43x-1.67x: worse by the prior, which no longer lets the U-Net fold keep a value only U-Net's "
    "runs set); fitted on the 128x128 set only 11.1% / 0.9950, library 14.1%, 0.42x-1.75x (10.9% / 0.9949, 14.0%, "
    "0.48x-1.75x); the 128x128 set by layer shape 15.8% / 0.991 (15.7% / 0.991); nested interval coverage "
    "(quantiles spanning 84%) 83.3% by configuration, 80.8% by network, 83.0% by 128x128 layer shape (target 80% +-"
    " 5%); emulator against the model (bench/emu_vs_model.py --n 40 --seed 0 --time-limit 2 --jobs 1) 120 of 120 "
    "within 10%, worst 0.916x / 1.070x. Not one target of issue 25 is met yet (mappings by configuration 10.1% "
    "against 10%). The 128x128 set predicted from a fit on the 16x16 set alone is unstable: 35.4% MAPE in this run,"
    " 142.6% (its matmuls 573%) in a first run whose fit started from the previous parameters (26.5% before): that "
    "fit has local minima in the matmul terms the 16x16 set's 36 matmul runs do not pin (from the same start with "
    "the prior and without it: call_floor_matmul 317 and 145, the 128x128 set at 35.1% and 19.9%: the prior's small"
    " residual is enough to send that fit to another minimum); it is not one of the issue's targets and is left as "
    "it is.",
    "",
    "Fitted on the 128x128 set alone, `dram_byte_cycles` is not pinned either (the 128x128 runs do not bind it): "
    "from the shipped 0.2933 it stays at 0.338 without the prior (the 16x16 set then at 10.65% / 0.9951, library "
    "13.72%, 0.54x-1.75x) and goes to 0.152 with it (11.09% / 0.9950, 14.13%, 0.42x-1.75x). Without a prior, a fold"
    " that cannot pin it keeps about the value it starts from, the full fit's, which U-Net's runs set: the U-Net "
    "fold and the 16x16 set held out whole were partly predicted with their own information. The prior removes that"
    " leak, and the by-network and 128x128-only rows of costmodel.md are worse for it; with it, the memory-bus "
    "bound still improves both held-out splits.",
    "",
    "Eighth round (issue 25, branch cost25h). Screening protocol: a full fit from the shipped parameters without "
    "restarts, every fold started from it, every parameter refitted, both 16x16 splits (70-370 s a variant on the "
    "shared machine). Cells: DOSA-mapping MAPE / Spearman, library MAPE, predicted / measured range of all 16x16 "
    "runs; variants that were worse in-sample were not cross-validated.",
    "",
    "| variant | fitted | in-sample | by configuration | by network |",
    "|---|---:|---|---|---|",
    "| none (the model as it was) | | 9.73% / 0.99529, library 12.54% | 10.11% / 0.99451, library 13.04%, "
    "0.50x-1.71x | 10.54% / 0.99494, library 13.76%, 0.41x-1.67x |",
    "| requests in flight: a call's DMA lasts at least its strided requests beyond the L2 (`dram_req`) x a slot time "
    "(the L2 miss's round trip over the DMA's 16 requests in flight) | 1.95 cycles (binds almost nowhere) | "
    "unchanged | 10.10% / 0.99453, library 13.03%, 0.50x-1.71x | 10.54% / 0.99494, library 13.75%, 0.41x-1.67x |",
    "| the DMA latency- or bandwidth-bound, not both: max(requests x `dma_request_cycles`, bytes / rate) instead of "
    "their sum (the waits beyond the L2 and the LLC still added) | `dram_efficiency` 0.55 | 10.12% / 0.99495, "
    "library 12.64% | | |",
    "| the same, each request at least one 16-byte beat of the bus | 0.63 | 10.07% / 0.99466, library 12.69%, "
    "0.50x-1.51x | 10.50% / 0.99418, library 13.27%, 0.50x-1.52x | 10.98% / 0.99439, library 14.08%, 0.34x-1.55x |",
    "| the same with the waits beyond the L2 and the LLC inside the latency side (max(bytes / rate, requests x a + "
    "`dram_req` x b + `far_req` x c)) | | 11.21% / 0.99403, library 13.30%, up to 1.83x | | |",
    "| a call's stores are not hidden behind compute (LoopConv.scala keeps two loops in flight, `concurrent_loops = "
    "2`, and a loop's slot is freed only when its mvouts are done: compute + the stores' DMA time) | | 11.20% / "
    "0.99448, library 13.03% | 11.55% / 0.99413, library 13.56% | |",
    "| the same for loop_conv_ws only | | 10.74% / 0.99451, library 12.70% | 11.07% / 0.99406, library 13.19%, "
    "0.49x-1.68x | |",
    "| **a strided store on a tensor beyond the LLC (`far_st_req`) waits `llc_miss_cycles` twice, a load once "
    "(shipped)** | | **9.56% / 0.99577, library 12.59%, 0.54x-1.68x** | **9.92% / 0.99539, library 13.07%, "
    "0.52x-1.71x** | **10.34% / 0.99586, library 13.82%, 0.41x-1.67x** |",
    "",
    "The shipped term is the sixth round's \"store's two DRAM transfers\", which then helped by configuration every "
    "time and by network in one bench run of two: the U-Net fold was flat in `dram_byte_cycles` and landed where its "
    "start left it. With the seventh round's prior that fold is pinned, and the term improves DOSA's mappings on both "
    "splits (by configuration below the 10% target) and Spearman, while the library's MAPE moves by +0.03 / +0.06 "
    "points (the refit of the shared parameters). It is the memory-bus bound's physics applied to the wait as well: "
    "the write-allocate, write-back L2 fetches a block a partial store does not fill and writes it back dirty, two "
    "DRAM transfers where a strided load makes one; it has no parameter of its own, and only U-Net's C1_K64_P570 "
    "has strided stores beyond the LLC among the 16x16 runs, so no fold can tune it. Model "
    "(`_cycle_terms`), emulator (gemmini_emu.c `call_terms`: (far_req + far_st_req) x llc_miss_cycles) and tests "
    "(tests/cost test_strided_stores_dram_serves_wait_on_it_twice, tests/codegen "
    "test_strided_stores_beyond_the_llc_wait_on_dram_twice) changed together.",
    "",
    "What else was looked at (no term followed):",
    "",
    "- **The scratchpad and accumulator a call fills** (its input and weight rows against half the configuration's "
    "scratchpad; its output rows against half the accumulator: the library sizes its tiles to half, DOSA's mappings "
    "may take more): DOSA's mappings show no trend (mean log(predicted / measured) -0.02 to +0.04 in every quarter, "
    "65 runs above three quarters of the scratchpad at +0.02). The library is short by -0.13 at half to three "
    "quarters of it (55 runs) but not above (-0.01): not a footprint effect. The FSM double buffers by halves "
    "whatever the software's addresses say (LoopConv.scala, ucb-bar/gemmini: loop i's input starts at i x max_addr /"
    " concurrent_loops and its weights end at (i + 1) x that, since 9dc6ec8 in 2021; sp_tiled_conv's A and B "
    "addresses are not used by it), and the images' dummy Gemmini is sized for the largest buffers.",
    "- **Compute**: runs the model calls compute-bound (DMA under half the compute) are within +0.03 (16x16, 137 "
    "runs) and -0.03 (128x128, 304), flat in rows per compute, computes per preload, channel tile and stride. The "
    "misses are on the memory side.",
    "- **The library's worst runs** (RetinaNet's C256_K256_P4 and C256_K720_P4 / P7 3x3, ResNet-50's C512_K512_P7 "
    "3x3 at strides 1 and 2: tiles of 96-112 output channels x 120-128 input channels with the whole kernel) move "
    "2,000-3,460 strided weight requests a call on weights between the L2 and the LLC and measure 8.4-19.3 cycles "
    "per such request; the same 112 x 128 tiles of RetinaNet's C256_K256_P2 3x3 measure 4.9-5.7 at stride 1 (13.1-15.3k "
    "cycles a call, about the model's DMA alone) and 9.4-9.9 at stride 2, the same calls. The ResNet-50 classifier under the "
    "library's 896 x 128 tiles measures 8.4 cycles per strided request, under DOSA's 62- and 31-block tiles 4.8-5.1, "
    "with calls of the same mvin shape (16 rows of 64 bytes, rows 1,000 B apart) and within 3% of the same requests "
    "(2,528 and 2,603 a call): what differs is not in the call. Both agree with the fifth round's reading (the "
    "library's run of a layer comes first, on weights the LLC may not hold yet); a request to POST /evaluate does "
    "not carry that history.",
    "- LoopConv.scala's execute issues nothing of a loop until all of its loads have been issued (`ld_ahead`), and "
    "the next loop's loads start once this loop's are issued: one call's DMA behind the previous call's compute, as "
    "the model's max(DMA, compute) per call has it.",
    "",
    "Through bench/costmodel.py (four restarts from the previous shipped parameters, every fold from that fit; the "
    "shipped parameters are its result, the single fit of the screen to four digits): by configuration 9.9% / "
    "0.9954, library 13.1%, 0.52x-1.71x (before this round 10.1% / 0.9945, 13.0%, 0.50x-1.71x); by network 10.3% / "
    "0.9959, library 13.8%, 0.41x-1.67x (10.5% / 0.9949, 13.8%, 0.41x-1.67x); fitted on the 128x128 set only 11.0% /"
    " 0.9960, library 14.5%, 0.42x-1.75x (11.1% / 0.9950, 14.1%, 0.42x-1.75x); the 128x128 set by layer shape 15.7% /"
    " 0.991 (15.8% / 0.991); nested interval coverage (quantiles spanning 84%) 82.2% by configuration, 79.1% by "
    "network, 82.9% by 128x128 layer shape (83.3%, 80.8%, 83.0%). `llc_miss_cycles` 6.57 -> 7.60, `overlap_loss` "
    "0.200 -> 0.178, `op_overhead_cycles` 0.015 -> 0.038, `block_wait_cycles` 9.0 -> 9.4. Met now: DOSA's mappings "
    "within 10% held out by configuration, Spearman on every split; not met: the mappings by network (10.3%), the "
    "library (13.1% / 13.8%), the worst runs (U-Net's C1024_K1024_P28 under DOSA's mappings 0.52x by "
    "configuration, 0.41x by network; the library's ResNet-50 C512_K512_P7 stride 2 and classifier 0.56-0.60x).",
    "",
    "Ninth round (issue 25, branch cost25i): the noise floor first (its section below, `noise_floor`), then the "
    "worst rows. Screening protocol as in the eighth round (a full fit from the shipped parameters without restarts, "
    "every fold from it, both 16x16 splits; 90-120 s a variant). The model itself: in-sample 9.56% / 0.99577, "
    "library 12.59%; by configuration 9.92% / 0.99539, library 13.07%, 0.52x-1.71x; by network 10.35% / 0.99586, "
    "library 13.82%, 0.41x-1.67x.",
    "",
    "- **The floor breaks no target.** FireSim is deterministic: the one pair of the 128x128 set with the same calls "
    "in the same order (mappings differing only inside a call) measures 104,141,288 and 104,136,063 cycles. What "
    "moves identical calls is the file they ran in: the best per-group predictor reaches 0.8% MAPE on the DOSA "
    "mappings (71 of 222 runs have a twin) and 4.1% on the library's runs (217 of 222); the twins' noise (sd 0.096 "
    "and 0.083 of log cycles) would cost an oracle 4.3% and 5.9% if every run were as noisy, against targets of 10% "
    "and 12%. The widest group (1.84x) costs at best 1.36x either way. By network the floor is 0-1.4% on the "
    "mappings and 2.3-6.7% on the library (ResNet-50's library runs: 6.7%, noise 8.6%). Twins in two networks' "
    "files (other layers before them) are no further apart than twins in one network's files, so the floor is not "
    "the history of a file; it also cannot see a history that every file of a network shares (a library run that "
    "reads its weights first, the fifth round's reading), which counts as model error here.",
    "- **The 1.71x row is a twin.** C1024_K256_P14 under DOSA's mapping on the 512-row accumulator "
    "(analytical_resnet50, 281,428 cycles) makes the same calls in the same DRAM-level order as on a 1792-row one "
    "(both_resnet50, 518,207): the accumulator does not enter them (the tile fits both), and the model, held out, "
    "gives 481k and 462k. No accumulator term can lower one without the other, and it is within 1.8x already.",
    "- **The library's channel tiles are not multiples of DIM where it grew them back**: tiled_conv_auto's grow "
    "step adds one to an argument at a time (gemmini.h, dosa branch), so its recorded tiles carry 105-125 and 255 "
    "channels. `library_mapping` writes them on the literal grid as whole passes (ceil(tile / passes) channels each: "
    "113 -> 120, 125 -> 128, 255 -> 256), which for 12 runs drops the library's last, small channel tile (256 "
    "channels in tiles of 125 are 3 tiles, read as 2; 255 of 256 is 2, read as 1). Read with the library's tile "
    "count (floor(tile / passes) per pass where rounding up loses a tile): in-sample 9.56% / 0.99576, library "
    "12.75%; by configuration 9.93% / 0.99538, library 13.24%; by network 10.35% / 0.99589, library 13.99%: the "
    "library worse, not kept (the added call carries 1-6 channels and the model's overlap hides it, so these runs, "
    "already short, come out shorter). The residuals these runs leave are the lead for the next round: with the "
    "shipped parameters (in-sample, mean log(predicted / measured)) the library's 3x3 runs whose weights exceed the "
    "L2 and whose whole output is one tile are short by -0.25 with an odd channel tile (27 runs: 105-125 channels x "
    "32-112 output channels) and by -0.06 with a multiple of DIM (15 runs); RetinaNet's C256_K256 3x3 at P2 "
    "measures 152-160k cycles with 125-channel tiles (stride 2) and 78-92k with 128 (stride 1), two layers apart in "
    "one file, after layers that read the same weight addresses, so not their history; the same holds for "
    "C256_K720 at P4 (125: 404-440k) and P2 (128: 279-315k). The DMA reads a misaligned row in one request per "
    "64-byte block (DMA.scala's StreamReader picks the aligned packet that reads most), as the model counts, and "
    "the calls' compute passes are the same; what the odd tile costs was not found.",
    "- **Strided loads under the library**: the dosa branch's gemmini.h (the runs' library) sets `downsample = "
    "false` in both tiled_conv and tiled_conv_auto_inner (the stride-2 1x1 fast path of `dev` is commented out), "
    "and sp_tiled_conv moves in every row and column of a call's window (irows = orows x stride + krows - 1, "
    "`irow += 1 + downsample`), 1x1 included: what the model charges for these runs already (only Tileplan's own "
    "code subsamples a strided 1x1). The library's loop order (kch innermost, then kcol, krow, och, pixels) and its "
    "reload of every tile per call (no `a_reuse` / `b_reuse` on that branch) are the model's too; its tile search "
    "is replayed to the recorded tile for every library run checked (RetinaNet's 22 layers on one configuration: "
    "the same tiles, 1-1,118 candidates), so neither explains the odd-tile residual above.",
    "- Nothing else was tried in the time: the first-touch, in-flight and memory-bus terms of rounds 5-8 cover the "
    "other worst rows (U-Net's C1024_K1024_P28 under DOSA's mappings, ResNet-50's classifier under the library).",
    "",
    "Tenth round (issue 25, branch cost25j): the odd channel tile against the hardware's code (gemmini.h of the "
    "runs' dosa branch, 959b23f; LoopConv.scala, ReservationStation.scala, ExecuteController.scala, "
    "LoadController.scala of ucb-bar/gemmini at 965ea0b, March 2023). The ninth round's three readings, checked:",
    "",
    "- **Misaligned rows**: a channel tile of 125 misaligns only the input rows (a pixel's channels; the second "
    "tile starts at byte 125). The weight rows a call reads are one per (kernel row, kernel column, input "
    "channel), each the output-channel tile's bytes (LoopConvLdWeight: `((krow x kernel_dim x in_channels + kcol "
    "x in_channels + kch) x out_channels + och)`), so their alignment follows the output-channel tile, 112 in "
    "both the 125- and the 128-channel runs of RetinaNet; the inputs of those runs are 4 KB. Not the mechanism.",
    "- **Split mvins**: LoopConvLdWeight moves weights in mvins of min(kchs - kch, DIM) rows (125 channels: 7 "
    "blocks of 16 rows and one of 13, the same 8 mvins per kernel position and 64-channel piece as 128), "
    "LoopConvLdInput in mvins of min(kchs - ich, 64) channels (64 + 61), and LoopConvExecute issues ceil(kchs / "
    "DIM) preloads per kernel position either way. Not the mechanism.",
    "- **Which loops are inside which**: tiled_conv's order (CRSKPQN) and its reload of every tile per call are "
    "the same for both. What differs is the last channel tile of a reduction: where the tile does not divide the "
    "channels it is small (256 = 125 + 125 + 6 = 240 + 16 = 119 + 119 + 18; 512 = 4 x 113 + 60).",
    "",
    "Part of the mechanism: loop_conv_ws holds two calls (LoopConv.scala: `concurrent_loops = 2`, a head and a "
    "tail slot). A call is configured only into a free slot, and a slot is freed only when its call has issued "
    "all its loads, computes and stores (`all_completed`, head first). So call i's loads cannot start before call "
    "i - 2 has issued its last compute. With calls of one size that is the model's max(DMA, compute) per call; a "
    "large call followed by a small one (the reduction's small last channel tile) leaves the next large call's "
    "loads waiting for the large call's computes, and that DMA is no longer hidden. bench/loopconv_slots.py "
    "(bench/results/loopconv_slots.md) replays every 16x16 conv run's calls in their order through the two slots, "
    "each call's DMA and compute time from the model with the shipped parameters, nothing refitted: 71 of 204 "
    "library runs are exposed by more than 1% of their cycles, 2 of 204 DOSA mappings (their tiles divide the "
    "layer). In-sample MAPE of the library's conv runs 12.39% -> 12.00% with the model's tiles, 11.53% with the "
    "library's own channel tiles (which add the small call the literal grid drops: the ninth round's reading, "
    "worse alone, is what the slots need); DOSA's mappings 9.34% -> 9.32%. On the group of the ninth round "
    "(library 3x3, weights beyond the L2, one output tile, a channel tile short of all channels) the mean "
    "log(predicted / measured) goes from -0.249 to -0.171 (27 runs, tiles not a multiple of DIM) and from -0.059 "
    "to +0.017 (15 runs, multiples of DIM). It overshoots where the model is already high: U-Net's C256_K128_P200 "
    "2x2 (208 + 48 channels) 1.08-1.28x -> 1.27-1.51x, C512_K256_P104 2x2 1.34-1.49x -> 1.39-1.55x, ResNet-50's "
    "C256_K128_P56 1x1 on the 512-row configuration 1.07x -> 1.26x.",
    "",
    "Not shipped: the exposure depends on each call's neighbours, which the model's per-call rows (merged across "
    "identical calls for the calibration, `merge_identical_calls`) do not carry. Shipping it needs the call "
    "sequence (or each reduction group's first and last calls) in the features, the library's runs read with "
    "their own channel tiles, a refit with both held-out splits, and the same two-slot pipeline in the emulator "
    "(gemmini_emu.c times Tileplan's calls one after another).",
    "",
    "What is left of RetinaNet's pair is not this: with the library's tiles and the slots, C256_K256_P2 at stride "
    "2 (125 channels) is still at 0.77-0.81x and P4 at 0.72-0.76x, while the 128-channel run of the same weights "
    "(P2, stride 1) measures 78-92k cycles, about the model's DMA alone (84k, computes hidden). The 125-channel "
    "runs measure more than the model's DMA and compute of all nine calls with no overlap at all (131k at P2, "
    "169k at P4; measured 152-160k and 187-198k), so each 125-channel call pays something the 128-channel calls "
    "do not, beyond its exposure; DOSA's mappings of the same two layers (three calls of one kernel row and all "
    "channels) take 70-81k and 86-93k. Seen on the way, not modelled:",
    "",
    "- LoadController.scala tracks at most `max_in_flight_mem_reqs / block_rows + 1` = 2 mvin commands in flight "
    "(DMACommandTracker): a load of 16 narrow rows waits a whole round trip with one other mvin beside it, a "
    "latency bound per mvin that the model's per-request terms do not have (a candidate for the narrow-row misses "
    "of issue 25).",
    "- ExecuteController.scala streams 16 rows for a preload that brings new weights whatever the compute's rows "
    "(`total_rows` = block_size unless D is garbage) and max(rows, 4) for a compute that keeps them; operands A "
    "and D in one scratchpad bank take turns (`same_bank`, `one_ahead`), which doubles such a preload. Where the "
    "banks split the FSM's two halves depends on the image's scratchpad, which is not published (DOSA's mappings "
    "assume more than 256 KiB: DOSA's own mapping of C256_K256_P2 loads 12,288 weight rows in one call).",
    "- ReservationStation.scala: a load waits on an execute instruction whose range wraps past the top of the "
    "scratchpad (`wraps_around`); the top weight block of the upper slot ends at the top for 125 and 128 channels "
    "alike, so it does not separate them.",
    "",
    "Eleventh round (issue 25, branch cost25k): loop_conv_ws's two call slots as a term of the model. With two "
    "slots, call i + 1's loads and call i's computes both start when call i's loads and call i - 1's computes are "
    "done, so the time between the starts of two computes is max(compute_i, DMA_(i+1)): a layer lasts DMA_1 + the "
    "sum of max(compute_i, DMA_(i+1)) + compute_n, which is the model's max(DMA, compute) per call when the calls "
    "are alike. The model now carries each call's successor's DMA columns (`nx_*`, `DMA_COLUMNS`): under the library "
    "(loop_conv_ws: no `reuse`, overlapped convolutions) the successor in the innermost DRAM loop when that is a "
    "channel loop (its last tile's successor its first: the loop starts again), the call itself everywhere else "
    "(`_slot_loop`); a call's work is max(compute, the successor's DMA) + overlap_loss x the shorter (`_cycle_terms`). "
    "The emulator pairs each library-stream convolution call with the next one (`call_slots`; the last with the "
    "first). No parameter of its own. With the shipped parameters it changes the prediction of 96 of the 222 "
    "library runs (by up to 17%) and of no DOSA mapping, 16x16 or 128x128: their tiles divide the layer, so where "
    "their calls pair with others (30 and 617 runs) the pairs differ only in which call carries the stores, beside "
    "computes alike; the mapping runs move only through the refit of the shared parameters (the noise floor's "
    "128x128 row below counts 243 runs with a twin of identical model inputs, was 247: the successor's columns "
    "carry the DRAM-level order, so four runs whose calls are the same in another order no longer count). "
    "Screening protocol of the eighth round (a full fit from the shipped parameters, every fold started "
    "from it, every parameter refitted; four restarts land on the same fit); cells: DOSA-mapping MAPE / Spearman, "
    "library MAPE, predicted / measured range of all 16x16 runs:",
    "",
    "| variant | fitted | in-sample | by configuration | by network |",
    "|---|---:|---|---|---|",
    "| none (the model as it is) | | 9.56% / 0.99577, library 12.59% | 9.92% / 0.99539, library 13.07%, "
    "0.52x-1.71x | 10.35% / 0.99586, library 13.82%, 0.41x-1.67x |",
    "| **two call slots**, the library's runs as read now (the literal grid: 125-channel tiles read as 128, 240 as "
    "240) | overlap_loss 0.169 (0.178), llc_miss_cycles 7.98 (7.60), block_wait_cycles 9.76 (9.38), "
    "tile_search_cycles 258 (283) | 9.49% / 0.99580, library 11.93% | **9.80% / 0.99551, library 12.37%, "
    "0.54x-1.70x** | **10.27% / 0.99579, library 12.91%, 0.41x-1.66x** |",
    "| the library's own tile count (floor(tile / passes) channels a pass where the grid's rounding up loses the "
    "small last tile: 256 in tiles of 125 read as 120 + 120 + 16, not 128 + 128), no slots | | 9.56% / 0.99576, "
    "library 12.96% | 9.92% / 0.99545, library 13.45% | 10.35% / 0.99585, library 14.23% |",
    "| the slots with the library's own tile count | overlap_loss 0.165 | 9.50% / 0.99581, library 11.69% | "
    "9.80% / 0.99545, library 12.11%, 0.54x-1.70x | 10.28% / 0.99577, library 12.69%, 0.41x-1.66x |",
    "| the slots on the input-channel loop only | | as both channel loops (no run's innermost loop is an "
    "output-channel loop of unequal tiles) | | |",
    "| LoadController's two mvin commands in flight (DMACommandTracker): a call's DMA lasts at least its load mvins "
    "(LoopConvLdInput: DIM pixels x 64 B of channels each; LoopConvLdWeight: DIM channels x the output-channel tile "
    "in 64-byte pieces; loop_ws's A and B blocks) x a fitted time, no slots (from 40) | 4.6 cycles (binds almost "
    "nowhere; U-Net's C1_K64_P570, the 1-channel layer it was meant for, is store-bound) | 9.54% / 0.99579, library "
    "12.58% | 9.93% / 0.99540, library 13.07%, 0.52x-1.71x | 10.35% / 0.99585, library 13.84%, 0.40x-1.67x |",
    "",
    "The slots improve every MAPE of both splits (the library's by 0.7 and 0.9 points, the mappings' by 0.1) and the "
    "mappings' Spearman by configuration, but the mappings' Spearman by network goes from 0.99586 to 0.99579: no "
    "mapping run's calls change, the refit moves the shared parameters, and the U-Net fold's mean log(predicted / "
    "measured) of its mappings goes from +0.003 to -0.003 (its within-network Spearman 0.9737 -> 0.9730; "
    "ResNet-50's 0.9588 -> 0.9586). The rule of these rounds (every figure of both splits improves) is not met, so "
    "the fitted defaults leave the slots off: `CostParams.call_slots` = 0. The term is in the model and the emulator "
    "as that switch (a descriptor's `cost_params` `{\"call_slots\": 1}` turns it on; tests/cost/test_call_slots.py, "
    "tests/codegen test_the_library_streams_call_slots_are_timed_as_the_model_times_them: a 3x3 convolution of 256 "
    "channels in the library's tiles of 240 in the library's load order, 1.35x slower with the slots in the model "
    "and the emulator alike, within 1% of each other), so bench/results/costmodel.md and emu_vs_model.md are "
    "unchanged. Reading the library's runs with their own tile count helps the library only with the slots (12.11% "
    "/ 12.69%, the best library figures of any variant so far) and costs Spearman on both splits; it is not "
    "shipped either. With the slots the library's worst runs held out by configuration are ResNet-50's classifier "
    "(0.59-0.60x: a tiled_matmul, loop_ws, which the slots leave alone), its C512_K512_P7 at stride 2 (0.56x -> "
    "0.60-0.63x: 113-channel tiles read as 120, 4 x 120 + 32) and RetinaNet's C256_K256_P4 (0.62-0.63x: 125-channel "
    "tiles read as two of 128, no small call); by network U-Net's 2-channel head (0.41-0.44x, unchanged).",
    "",
    "Shipped after all (branch cost25l): the slots are a fact of the hardware (LoopConv.scala, concurrent_loops = 2) "
    "and improve every MAPE; a Spearman moved by 7e-5 through the refit, far above its 0.993 target, is no reason to "
    "model the FSM wrong. `CostParams.call_slots` = 1 with every parameter refitted (calibrate.fit, 4 restarts, loss "
    "15.85 -> 15.69): held out by configuration 9.8% / 0.9955, library 12.4%; by network 10.3% / 0.9958, library "
    "12.9% (bench/results/costmodel.md); emulator and model still within 10% on all 360 runs of "
    "bench/results/emu_vs_model.md. The table above is this round's screening, as it was run.",
    "",    "Twelfth round (issue 25, branch cost25m): what DRAM serves in whole rows. U-Net's 2-channel head "
    "(C64_K2_P388) reads its 9.6 MB input in whole 64-byte pixel rows, so no request of it counted as served "
    "by DRAM (`far_req` counts strided rows only) and only DRAM's own rate (`dram_byte_cycles`, the far-DRAM "
    "bound) charged those reads; with U-Net held out that parameter falls to its prior (0.151 against 0.295) "
    "and the head's six runs were predicted 0.41-0.54x. But every 64-byte block DRAM reads is one read of "
    "Gemmini's DMA (DMA.scala, StreamReader: one TileLink get per aligned block, at most 16 in flight), whole "
    "row or strided, and waits on DRAM as long. Term (`whole_far_reads`, no parameter of its own): a call's "
    "loads make far_bytes / 64 DRAM reads, at least one per strided load DRAM serves (far_req - far_st_req); "
    "the reads beyond those strided loads wait `dram_request_cycles` + `llc_miss_cycles` as the strided ones "
    "do and cross the memory bus (`refill_cycles`). The third round's \"LLC miss on every request of a tensor "
    "beyond the LLC, whole rows too\" (not kept then) counted every request of such a tensor, before the "
    "far-DRAM bound, the prior and the slots existed, and whatever the previous call left in the L2; this "
    "counts the blocks DRAM reads (far_bytes, less what the previous call left in the L2). Screening protocol "
    "of the eighth round (a full fit from the shipped parameters, every fold from it, every parameter "
    "refitted, both 16x16 splits; 75-190 s a variant on a machine at load 10-18); cells: DOSA-mapping MAPE / "
    "Spearman, library MAPE, predicted / measured range of all 16x16 runs:",
    "",
    "| variant | fitted | in-sample | by configuration | by network |",
    "|---|---:|---|---|---|",
    "| none (the model as shipped by cost25l) | loss 15.693 | 9.49% / 0.99580, library 11.93%, 0.55x-1.67x | "
    "9.80% / 0.99551, library 12.37%, 0.54x-1.70x | 10.27% / 0.99579, library 12.91%, 0.41x-1.66x |",
    "| A: the whole-row reads DRAM serves wait `llc_miss_cycles` and cross the memory bus | llc_miss_cycles "
    "7.84, loss 15.683 | 9.49% / 0.99579, library 11.86%, 0.54x-1.67x | 9.82% / 0.99540, library 12.34%, "
    "0.53x-1.70x | 10.11% / 0.99589, library 12.67%, 0.57x-1.66x |",
    "| **A, and `dram_request_cycles` too (they are served beyond the L2 as well; shipped)** | "
    "dram_request_cycles 0.925, llc_miss_cycles 7.82, dram_byte_cycles 0.295, block_wait_cycles 9.11, loss "
    "15.680 | **9.48% / 0.99578, library 11.85%, 0.54x-1.67x** | **9.79% / 0.99545, library 12.30%, "
    "0.53x-1.70x** | **10.09% / 0.99587, library 12.65%, 0.57x-1.65x** |",
    "| requests in flight: a call's DMA lasts at least `dram_byte_cycles` x max(far_bytes, 64 x the strided "
    "loads DRAM serves) (each read holds one of the 16 slots for DRAM's round trip; the seventh round's "
    "variant, on today's model), without A | dram_byte_cycles 0.228, loss 15.768 | 9.66% / 0.99577, library "
    "12.12%, 0.60x-1.68x | 10.03% / 0.99538, library 12.62%, 0.57x-1.71x | 10.16% / 0.99569, library 12.69%, "
    "0.50x-1.67x |",
    "| A and the in-flight bound | dram_byte_cycles 0.213, loss 15.699 | 9.52% / 0.99579, library 11.95%, "
    "0.56x-1.67x | 9.98% / 0.99530, library 12.51%, 0.54x-1.71x | 10.14% / 0.99584, library 12.56%, "
    "0.55x-1.66x |",
    "",
    "The shipped variant improves every MAPE of both splits and the Spearman by network; the Spearman by "
    "configuration moves by -6e-5 (0.99551 -> 0.99545, far above its 0.993 target). With U-Net held out the "
    "head's six runs are now 0.61-0.83x (were 0.41-0.54x), so no run held out by network is beyond 1.8x; held "
    "out by configuration one is (U-Net's C1024_K1024_P28 under a 448-call DOSA mapping, 0.54x -> 0.53x: 20.5 "
    "cycles per strided weight read beyond the LLC, which the in-flight bound reaches but which costs more "
    "than it gains elsewhere). Model (`whole_far_reads`, `_dma_cycles`), emulator (gemmini_emu.c `call_terms`, "
    "the same count from its far_req, far_st_req and far_bytes) and tests (tests/cost "
    "test_whole_rows_dram_reads_wait_as_strided_requests_do, tests/codegen "
    "test_whole_rows_dram_reads_wait_as_strided_requests_do) changed together; the shipped parameters are the "
    "full fit (calibrate.fit with 4 restarts from the previous ones: loss 15.693 -> 15.680, the restarts find "
    "no lower one).",
    "",
    "Screened and not shipped, the next lead: the L2 holds a tile between two reads when everything the calls "
    "between them touch fits it. The library's loop order (CRSKPQN) reads a pixel tile's input again for every "
    "output-channel tile, with only that pixel tile's input (all channel tiles) and one output-channel tile's "
    "weights in between; U-Net's 2x2 convolutions under the library (input 5.5-10 MB beyond the LLC, 16 output "
    "channels a call) are over-predicted 1.39-1.62x because every one of those reads is charged to DRAM. Term "
    "(on top of the shipped one, no parameter of its own; `_in_l2_across` extended, convolutions only): "
    "walking the DRAM loops from the innermost out, a loop that does not index the operand keeps its tiles in "
    "the L2 when one of its iterations touches at most l2_bytes (the tiles of I, W and O of the loops inside "
    "it, each row rounded up to whole 64-byte blocks); its tiles then load from DRAM only on that loop's first "
    "iteration (far_bytes), and their strided requests neither wait on DRAM nor cross the memory bus "
    "(dram_req, far_req):",
    "",
    "| variant | fitted | in-sample | by configuration | by network |",
    "|---|---:|---|---|---|",
    "| R1: far_bytes only, footprint in bytes | loss 15.673 | 9.49% / 0.99575, library 11.83%, 0.53x-1.67x | "
    "9.93% / 0.99526, library 12.36%, 0.51x-1.70x | 10.42% / 0.99589, library 12.68%, 0.57x-1.65x |",
    "| R2: and the strided requests (dram_req, far_req), footprint in bytes | dram_request_cycles 1.78, loss "
    "15.075 | 9.82% / 0.99536, library 10.26%, 0.34x-1.66x | 10.27% / 0.99498, library 10.82%, 0.34x-1.69x | "
    "10.95% / 0.99526, library 11.00%, 0.35x-1.66x |",
    "| R3: R2 with the footprint in 64-byte blocks (a 16-byte weight row holds a whole block of the L2) | "
    "dram_request_cycles 1.48, loss 15.472 | 9.74% / 0.99534, library 11.01%, 0.34x-1.67x | 10.12% / 0.99499, "
    "library 11.51%, 0.34x-1.70x | 10.55% / 0.99531, library 11.65%, 0.35x-1.67x |",
    "| R4: R3, and the previous call's tile (today's `_in_l2_across`) under the same footprint test | "
    "dram_request_cycles 1.48, loss 15.407 | 9.55% / 0.99587, library 11.00%, 0.56x-1.67x | 9.93% / 0.99549, "
    "library 11.50%, 0.55x-1.70x | 10.29% / 0.99585, library 11.65%, 0.57x-1.66x |",
    "",
    "R2 and R3 keep a 590 KB weight tile (9,216 rows of 16 bytes, each a whole block) across the pixel loop of "
    "U-Net's C1024_K1024_P28 mappings, as today's previous-call rule does for far_bytes, and those fall to "
    "0.34x; R4 tests that rule too. R4 meets the library's 12% target both ways (U-Net's library runs 12.5% -> "
    "10.5% by configuration; its C256_K128_P200 2x2 convolution from 1.24-1.52x to 0.92-1.11x, while "
    "C512_K256_P104's stays at 1.42-1.62x: the footprint test does not reach it) but DOSA's mappings lose 0.14 "
    "/ 0.20 points (9.79% -> 9.93%, 10.09% -> 10.29%: the refit raises `dram_request_cycles` 0.93 -> 1.48, and "
    "RetinaNet's and ResNet-50's LLC-served runs rise by ~10%), so it trades one target for another and is not "
    "shipped; shipping it also needs the emulator to count the same hits (its loads' reuse is tracked for the "
    "previous call only, `far_prev`), e.g. a load counted as an L2 hit when the blocks the run touched since "
    "the same load fit the L2.",
    "",
    "Thirteenth round (issue 25, branch cost25n): the twelfth round's lead with the caches as the SoC builds "
    "them. Rocket-chip's L2 (SiFive's InclusiveCache, 512 KiB, 8 ways of 64-byte blocks) and FASED's LLC model "
    "behind it (4 MiB, 8 ways) replace a random way, so a tile read again is neither all in the cache (the "
    "previous-call rule, `_in_l2_across`) nor all out of it (R4's footprint test): a block survives the D bytes "
    "of fills between its two reads with probability exp(-D / cache). And a strided tile does not spread over the"
    " sets: rows a power-of-two pitch apart start in sets / g of them (g = that power / 64), so U-Net's 16-byte "
    "weight rows 1 KiB apart use 64 of the L2's 1,024 sets and a 9,216-row tile takes 16 blocks' worth of the "
    "cache a row. Term (no parameter of its own: ways, block and sizes are hardware facts; convolutions, "
    "tiled_matmul keeps `_in_l2_across`): walking the DRAM loops from the innermost out, for each loop that does "
    "not index the operand (kernel loops only shift the input window), D = one iteration's tiles of I, W and O "
    "(each row in whole 64-byte blocks, the operand's own rows as its sets see them: n x max(blocks a row, g) "
    "once the rows wrap around their sets); a call's tile misses 1 - exp(-D / cache) of its blocks when the "
    "innermost loop that moved on is that loop, all of them on its first read; the strided requests the L2 misses"
    " wait `dram_request_cycles` (`dram_req`), those the LLC misses too `llc_miss_cycles` (`far_req`), and DRAM "
    "reads the LLC's misses (`far_bytes`). Screening protocol of the eighth round (a full fit from the shipped "
    "parameters, every fold from it, every parameter refitted, both 16x16 splits; 110-220 s a variant); cells: "
    "DOSA-mapping MAPE / Spearman, library MAPE, predicted / measured range of all 16x16 runs:",
    "",
    "| variant | fitted | in-sample | by configuration | by network |",
    "|---|---:|---|---|---|",
    "| none (the model as shipped) | loss 15.680 | 9.48% / 0.99578, library 11.85%, 0.54x-1.67x | 9.80% / "
    "0.99541, library 12.32%, 0.53x-1.70x | 10.09% / 0.99592, library 12.63%, 0.57x-1.66x |",
    "| H: R4's footprint test (all or nothing) with the sets, the L2 only | dram_request_cycles 1.28, loss 15.249"
    " | 9.75% / 0.99586, library 11.24%, 0.55x-1.65x | 10.28% / 0.99530, library 11.79%, 0.54x-1.71x | 10.53% / "
    "0.99578, library 12.07%, 0.57x-1.64x |",
    "| S0: random replacement, the L2 only, without the sets | dram_request_cycles 1.84, loss 15.140 | 9.79% / "
    "0.99539, library 10.42%, 0.40x-1.64x | 10.25% / 0.99496, library 11.01%, 0.39x-1.68x | 10.95% / 0.99530, "
    "library 11.25%, 0.41x-1.63x |",
    "| S2: random replacement with the sets, the L2 only (far_req and far_bytes follow the L2's misses) | "
    "dram_request_cycles 1.42, loss 14.971 | 9.48% / 0.99589, library 10.53%, 0.55x-1.63x | 9.96% / 0.99534, "
    "library 11.11%, 0.53x-1.67x | 10.64% / 0.99577, library 11.42%, 0.57x-1.62x |",
    "| S3: S2, and the LLC the same way (far_req and far_bytes follow the LLC's misses) | dram_request_cycles "
    "1.43, llc_miss_cycles 8.22, dram_byte_cycles 0.306, loss 14.874 | 9.36% / 0.99609, library 10.42%, "
    "0.55x-1.64x | 9.79% / 0.99558, library 10.94%, 0.54x-1.68x | 10.42% / 0.99593, library 11.13%, 0.55x-1.63x |",
    "| S3, the prior on dram_byte_cycles at weight 1 (0.01 now) | dram_byte_cycles 0.301, loss 14.935 | 9.34% / "
    "0.99611, library 10.42%, 0.55x-1.64x | 9.74% / 0.99559, library 10.94%, 0.54x-1.68x | 10.31% / 0.99598, "
    "library 11.10%, 0.55x-1.63x |",
    "| S3, the prior at weight 5 (dram_byte_cycles held at FireSim's measured DRAM rate) | dram_byte_cycles "
    "0.151, loss 14.902 | 9.35% / 0.99615, library 10.45%, 0.55x-1.64x | 9.79% / 0.99558, library 10.99%, "
    "0.54x-1.68x | 9.98% / 0.99598, library 11.04%, 0.55x-1.63x |",
    "| **S3 at weight 5 as written to ship (the other operands' rows each in whole blocks; 4 restarts)** | "
    "dram_request_cycles 1.41, llc_miss_cycles 8.39, loss 14.906 | 9.35% / 0.99612, library 10.45%, 0.55x-1.64x |"
    " **9.78% / 0.99556, library 10.99%, 0.54x-1.68x** | **10.00% (9.996%) / 0.99594, library 11.06%, "
    "0.55x-1.63x** |",
    "| the prior at weight 5 alone (the model as shipped) | dram_byte_cycles 0.151, loss 15.718 | 9.49% / "
    "0.99577, library 11.87%, 0.54x-1.67x | 9.94% / 0.99533, library 12.40%, 0.53x-1.70x | 10.12% / 0.99587, "
    "library 12.65%, 0.57x-1.66x |",
    "",
    "The sets are what make it work: without them (S0) the previous call's 590 KB weight tile of U-Net's "
    "C1024_K1024_P28 mappings mostly stays in the L2 and those runs fall to 0.39-0.41x; with them it misses all "
    "but 0.1% (the mapping measured at 20.5 cycles a weight request). With the LLC too (S3), U-Net's library runs"
    " go from 12.5% / 14.0% MAPE (by configuration / by network) to 8.7% / 9.3% (its 2x2 convolutions "
    "C512_K256_P104 from 1.39-1.62x to 0.98-1.10x, C256_K128_P200 from 1.24-1.52x to 0.96-1.15x), ResNet-50's "
    "from 13.7% / 13.1% to 13.2% / 12.6%, and the 128x128 set's loss falls with the 16x16 set's. The prior's "
    "weight matters only with the term: with RetinaNet held out `dram_byte_cycles` fitted to 0.40 (2.5 B/cycle, "
    "below the 5.5-8 B/cycle FireSim measured; the loss is flat between ~0.15 and ~0.40 once the caches' hits are"
    " counted) and put RetinaNet's C2048_K256_P4 mappings, bound by DRAM's rate, at 1.32-1.39x; at weight 5 every"
    " fold holds it at the measured 0.151 and they stay at 1.03x. What is left beyond 1.8x, both splits: one run,"
    " U-Net's C1024_K1024_P28 under the 448-call DOSA mapping, 0.54x / 0.55x (0.53x / 0.57x now); every other run"
    " is within 0.58x-1.68x. The mappings held out by network sit at 9.996%, on the target's edge (a refit from "
    "another start could land either side).",
    "",
    "Not shipped in this round: the emulator shares the reuse rule (gemmini_emu.c's `far_prev`, the previous "
    "call's loads, and every strided request of a group beyond the L2 counted), and it has no counterpart of the "
    "miss shares yet; shipping needs one (e.g. per 64-byte block the fills its L2 and LLC sets took since the "
    "block's last read, a survival of (7/8)^fills each, which is what exp(-D / cache) approximates), then the "
    "refit shipped in params.py, the catalog and the emulator's defaults, and bench/results/costmodel.md and "
    "emu_vs_model.md regenerated. With the term in the model alone (parameters as shipped), "
    "tests/codegen/test_one_timing.py still passes.",
    "",
    "Fourteenth round (issue 25, branch cost25p): the one run still beyond 1.8x, U-Net's C1024_K1024_P28 "
    "under DOSA's 448-call mapping (dnn_unet, `L3[WIO] K64 Q7`: each call loads the whole 3x3x1024 kernel "
    'slice of 16 output channels, 9,216 weight rows of 16 bytes 1 KiB apart in a 9.4 MB tensor, and 4 x 28 '
    "output pixels). The model gives it 59M cycles, FireSim 109M; almost all of the model's DMA time (55M of "
    "it) is the 3.8M weight reads it counts as served by DRAM (`far_req`: every one misses, the tile's rows "
    "use 64 of the L2's sets), each charged dma_request + dram_request + llc_miss + its bytes, ~12 cycles; "
    "FireSim's run takes ~25-29 per such read. Three facts of the data:",
    "",
    "- **Part of the miss is the runs' context, not the call.** The library's own run of this layer (the same "
    '1,536 calls in every file) measures 54.4M cycles in analytical_unet and 68.0M / 68.4M in dnn_unet / '
    'both_unet (1.26x); C1024_K512_P54 and C512_K1024_P30 (4.7 MB weights) show the same 1.15-1.23x between '
    "those files. No term of a call can follow that (third round: one chip, the files' context differs). "
    "Against the library's run in its own file (held out by configuration) the model is 1.25-1.28x short on "
    'both DOSA mappings that load the whole kernel slice per call (448 calls: measured 1.60x the library, '
    "modelled 1.25x; analytical_unet's 896-call `K64 Q2 P7`: 2.93x, modelled 2.35x) and 1.7x long on "
    "both_unet's 8,064-call `C2 Q7 S3 R3 K64` (measured 1.26x the library, modelled 2.12x): the model ranks "
    'these three mappings of one layer in the wrong order.',
    "- **The harness runs the mapping's own DRAM loop order; the model does not.** gemmini-rocc-tests' "
    '`gemmini-data-collection/templates/conv_tilings.c` calls `tiled_conv_dosa(..., WS, PERM_STR)` with the '
    "mapping's permutation; Tileplan costs every DOSA run with the reduction loops innermost "
    "(`tileplan.execution.call_loop_order`). In both_unet's 8,064-call mapping K is innermost, so consecutive "
    'calls read neighbouring 16-byte weight rows of the same 64-byte blocks (four K tiles a block: three of '
    'four reads hit the L2), which the model charges as DRAM reads. The 128x128 set shows the same at scale: '
    'its FC layers (C4096_K4096, C9216_K4096, 4- to 16-byte weight rows 4 KiB apart) take 6.8-9.9 cycles per '
    "read the model counts as DRAM's when K is the innermost DRAM loop (`C48 K64`, `C32 K64`, `C16 K64`: "
    'predicted 1.38-1.82x) and 21-27 when C is (`K128 C48`, `K64 C64`, `K64 C4`, ...: 0.47-0.65x), tiles and '
    'call counts alike; over the set (shipped parameters, in-sample), matmul mappings with K innermost are '
    'over-predicted by a median +0.19 (log mean +0.07 / +0.11 for K tiles of at least / under 64 bytes), with '
    'C innermost within +-0.1. `llc_miss_cycles` (8.4) is fitted across both kinds of read, so a run whose '
    'strided reads all come from DRAM (the 448-call mapping) is charged about half of what they cost.',
    '- **What such a read costs.** Runs whose far reads dominate measure 11-17 cycles per DRAM transfer at '
    "best (the library's C1_K64_P570 stores, RetinaNet's C2048_K256 weights under the library) and ~20-30 "
    'where every strided read misses both caches (what 16 requests in flight would give over a round trip of '
    '~350-450 cycles: an inference, not a measurement).',
    "",
    'Screened (protocol of the eighth round: one fit from the shipped parameters, every fold from it, every '
    'parameter refitted, both 16x16 splits); none is shipped:',
    "",
    '| variant | fitted | in-sample | by configuration | by network |',
    '|---|---:|---|---|---|',
    '| none (the model as shipped) | loss 14.906 | 9.35% / 0.99612, library 10.45%, 0.55x-1.64x | 9.78% / '
    '0.99556, library 10.99%, 0.54x-1.68x | 10.00% / 0.99594, library 11.06%, 0.55x-1.63x |',
    "| T1: a DRAM read occupies one of a fixed number of slots for DRAM's round trip (Little's law): a call's "
    'DMA lasts at least its DRAM transfers (those of the memory-bus bound) x a fitted `far_slot_cycles`, the '
    'fixed 8-cycle bus time its floor | far_slot_cycles 11.9 (its start; the loss is flat), llc_miss_cycles '
    '8.10, loss 14.906 | 9.28% / 0.99617, library 10.58%, 0.54x-1.64x | 9.71% / 0.99567, library 11.13%, '
    '0.53x-1.68x | 9.86% / 0.99619, library 11.36%, 0.53x-1.64x |',
    '| T2: the first read of a tile of a tensor larger than the LLC finds exp(-F / LLC) of its blocks still '
    "there (F = the layer's I + W + O: each layer runs twice back to back on the same static buffers, and "
    'every layer reuses them) | llc_miss_cycles 9.18, loss 14.967 | 9.42% / 0.99612, library 10.58%, '
    '0.58x-1.64x | 9.90% / 0.99559, library 11.15%, 0.56x-1.68x | 10.38% / 0.99600, library 11.88%, '
    '0.60x-1.63x |',
    "| T3: a strided tile's rows share 64-byte blocks with the neighbouring channel tile's (64 / width tiles "
    'a block): only the first misses, the others find the block if it survived one iteration of the channel '
    "loop (exp(-D / cache)), in the model's call order | dram_request_cycles 1.50, loss 14.946 | 9.43% / "
    '0.99611, library 10.51%, 0.54x-1.64x | 9.86% / 0.99562, library 11.02%, 0.53x-1.68x | 10.10% / 0.99595, '
    'library 11.10%, 0.53x-1.64x |',
    "| T4: T3 in the harness's order (a DOSA run's DRAM loops in its mapping's own order, conv_tilings.c's "
    "PERM_STR; the 128x128 matmul runs' too, which `tileplan.cost.firesim` writes in a fixed C, K, P order "
    'today: matmul_tilings.c was not read, the FC layers above say their order mattered), and for '
    "tiled_matmul B's rows the same neighbour rule when K is the innermost DRAM loop; the library's own runs "
    "keep the library's order | dram_request_cycles 2.61, block_wait_cycles 5.35, loss 14.277 (128x128 set: "
    'in-sample 13.85%, held out by layer shape 15.05% / 0.9936, now 15.5% / 0.992) | 9.47% / 0.99595, library '
    '10.40%, 0.58x-1.64x | 9.89% / 0.99553, library 10.99%, 0.56x-1.65x | 10.22% / 0.99593, library 11.21%, '
    '0.59x-1.68x |',
    "",
    "T1 improves DOSA's mappings on both splits (MAPE and Spearman) but costs the library 0.14 / 0.30 points "
    'and moves the 448-call run the wrong way (0.53x); T2 brings every run within 1.8x but loses 0.38 points '
    'by network (10.38%, beyond the 10% target): it trades the worst run for the MAPE targets and is not '
    "kept. T3 changes little because in the model's order (reductions innermost) neighbouring K tiles are a "
    'whole reduction apart. T4, the same rule in the order the harness ran, is the first variant that brings '
    'every 16x16 run within 1.8x held out both ways (0.56x-1.65x, 0.59x-1.68x) and lowers the loss by 0.63 '
    "(the 128x128 set by 0.45 points held out), but DOSA's mappings on the 16x16 runs lose 0.11 / 0.22 points "
    '(9.89%, 10.22% by network: beyond the 10% target) and their Spearman a little; so it is not shipped '
    "either. The lead is T4 done properly: reading a DOSA run's DRAM permutation (the mapping's own loop "
    'order, as `tiled_conv_dosa` / the matmul harness run it) into the execution the model costs, so that the '
    'caches see the calls in the order FireSim ran them, with `llc_miss_cycles` then fitted on reads that '
    'really go to DRAM. That changes what the model executes for every DOSA run (and how partial sums leave '
    "the accumulator when a reduction loop is not innermost, which the fork's code would have to say), so it "
    "needs the fork's conv and matmul routines read first, the model's order for DOSA runs only (the "
    "library's and Tileplan's code keep theirs), and the emulator a counterpart of the neighbour rule (its "
    'per-call `far_prev` tracks rows, not 64-byte blocks).',
    "",
    "Fifteenth round (issue 25, branch cost25q): the fork's routines read, nothing re-measured. "
    "gemmini-rocc-tests at 959b23f (the commit firesim-dosa's chipyard-dosa / gemmini-dosa pin) defines "
    'both harness routines in `include/gemmini.h`: `tiled_matmul(..., dataflow, perm, pe_dim)` (what '
    'matmul_tilings.c calls with PERM_STR) and `tiled_conv_dosa(..., perm)`. Each turns the permutation '
    'string into seven nested DRAM loops (a letter earlier in the string is an inner loop); the matmul '
    'names its tile loops P (rows, I0), K (columns, J0) and C (reduction, K0), so matmul_tilings.c runs '
    'the 128x128 set in its own order too, not the fixed C, K, P order `tileplan.cost.firesim` writes. '
    'Partial sums never leave the accumulator in either routine, whatever the order: a call loads the '
    'bias only on the first reduction tile (k0 = 0; krow = kcol = kch = 0) and moves its output to DRAM '
    'only on the last (k0 = K0 - 1; the last krow, kcol and kch tile), otherwise it passes no output and '
    'accumulates into the same accumulator rows every call uses (`D_sp_addr_start` is fixed). With a '
    'reduction loop outside an output loop the calls of different output tiles therefore accumulate into '
    "the same rows (the numbers are wrong, the timing is not affected: no spill, no reload). So T4's "
    "premise holds as measured: the harness's order changes only which calls follow which (the caches' "
    'view), not the DMA traffic of a call, and the model needs no partial-sum traffic for such orders. T4 '
    "was not re-screened here and the model is unchanged (fourteenth round's numbers stand: 9.89% by "
    "configuration, 10.22% by network, the latter beyond the 10% target). This confirms T4's reading of the "
    "128x128 matmul runs in their own PERM_STR order (P, K, C as above). What remains for shipping it is a "
    'variant that keeps both held-out splits within 10%, and the emulator counterpart of the 64-byte-block '
    'neighbour rule.',
    "",
    "Sixteenth round (issue 25, branch cost25r): T4 done properly, screened, not shipped. The DOSA runs' DRAM loops "
    "in their mapping's own order in the execution the model costs (a `library-perm` executor: Gemmini's library "
    "calls, `order` = the DRAM loops as the mapping lists them, reductions not moved innermost; the library's "
    "own runs and Tileplan's code keep theirs), so every order-dependent term (the caches' miss shares "
    "`_miss_shares`, loop_conv_ws's call slots `_slot_loop`, tiled_matmul's `_in_l2_across`) sees the calls in "
    "the order FireSim ran them; and `tileplan.cost.firesim` writing a matmul run's DRAM loops in its string's "
    "order (the P, K, C loops tiled_matmul(..., perm) runs, a loop the string does not list at DRAM "
    "outermost) instead of the fixed C, K, P. The neighbour rule on top, as a term with no parameter of its "
    "own: a strided tile that starts mid-block (its channel loop's previous tile read that 64-byte block) "
    "misses, for the requests of that first block of each row, only 1 - exp(-D / cache) of it, D = the "
    "blocks one iteration of the channel loop touches when a loop inside it moves the tile, else one call's "
    "(`_miss_shares`' arithmetic; convolutions: the input along C, the weights along K; tiled_matmul: A along "
    "C, B along K, whose strided requests had no miss share before). Screening protocol of the eighth round "
    "(one fit from the shipped parameters, every fold from it, every parameter refitted, both 16x16 splits; "
    "~35 s a variant); cells: DOSA-mapping MAPE / Spearman, library MAPE, predicted / measured range of all "
    "16x16 runs; the last column is every 16x16 run predicted by a fit on the 128x128 set only (bench/costmodel.py's "
    "third column, 10.7% as shipped):",
    "",
    "| variant | fitted | in-sample | by configuration | by network | fitted on 128x128 only |",
    "|---|---:|---|---|---|---|",
    "| none (the model as shipped) | loss 14.906 | 9.35% / 0.99612, library 10.45%, 0.55x-1.64x | 9.78% / 0.99556, "
    "library 10.99%, 0.54x-1.68x | 10.00% / 0.99594, library 11.06%, 0.55x-1.63x | 10.72% / 0.99651, library "
    "11.61%, 0.60x-1.72x |",
    "| U1: the harness's order alone (DOSA's convolutions and matmuls, the 128x128 matmuls' P, K, C) | "
    "dram_request_cycles 1.87, llc_miss_cycles 8.14, loss 14.713 | 9.37% / 0.99609, library 10.33%, 0.56x-1.63x | "
    "9.81% / 0.99561, library 10.88%, 0.55x-1.67x | 10.07% / 0.99578, library 10.92%, 0.55x-1.63x | 10.85% / "
    "0.99632, library 11.18%, 0.60x-1.71x |",
    "| U2: U1 and the convolutions' neighbour rule | dram_request_cycles 2.10, loss 14.678 | 9.45% / 0.99603, "
    "library 10.27%, 0.57x-1.64x | 9.90% / 0.99558, library 10.82%, 0.55x-1.68x | 10.18% / 0.99583, library "
    "10.89%, 0.55x-1.64x | 11.06% / 0.99621, library 11.28%, 0.59x-1.72x |",
    "| U3: U2 with D always one call (the neighbour's read just before) | dram_request_cycles 2.14, loss 14.920 | "
    "9.49% / 0.99604, library 10.60%, 0.57x-1.64x | 9.94% / 0.99556, library 11.12%, 0.56x-1.68x | 10.25% / "
    "0.99594, library 11.38%, 0.58x-1.64x | 11.30% / 0.99620, library 11.62%, 0.59x-1.73x |",
    "| **U4: U1 and tiled_matmul's neighbour rule** | dram_request_cycles 2.50, llc_miss_cycles 8.34, "
    "block_wait_cycles 5.94, loss 14.103 (the same from 4 restarts) | 9.37% / 0.99597, library 10.30%, 0.58x-1.60x | "
    "**9.79% / 0.99554, library 10.90%, 0.57x-1.63x** | **10.05% / 0.99588, library 10.96%, 0.57x-1.63x** | "
    "12.19% / 0.99586, library 13.83%, 0.64x-1.67x |",
    "| U5: U4 and the convolutions' neighbour rule (tiled_matmul's stores under the same rule change nothing) | "
    "dram_request_cycles 2.90, block_wait_cycles 4.57, loss 13.933 | 9.43% / 0.99586, library 10.23%, "
    "0.59x-1.63x | 9.87% / 0.99535, library 10.84%, 0.57x-1.64x | 10.14% / 0.99582, library 10.93%, 0.58x-1.66x | "
    "12.06% / 0.99578, library 13.78%, 0.66x-1.68x |",
    "| U6: U4 and T1 (a DRAM read's slot time `far_slot_cycles` as the floor of a call's DMA per DRAM transfer, "
    "fitted) | far_slot_cycles 10.5, loss 14.102 | 9.37% / 0.99597, library 10.30%, 0.58x-1.60x | 9.78% / "
    "0.99555, library 10.89%, 0.57x-1.63x | 10.04% / 0.99588, library 10.96%, 0.57x-1.63x | 12.18% / 0.99586, "
    "library 13.83%, 0.64x-1.67x |",
    "| U4 with DOSA's convolutions in the model's order (against conv_tilings.c: not a candidate) | "
    "dram_request_cycles 1.74, llc_miss_cycles 8.78, loss 14.536 | 9.26% / 0.99622, library 10.35%, "
    "0.57x-1.61x | 9.68% / 0.99562, library 10.93%, 0.558x-1.65x | 9.95% / 0.99610, library 11.09%, "
    "0.58x-1.60x | 12.22% / 0.99618, library 14.31%, 0.62x-1.69x |",
    "| U4 with every matmul run (the 128x128 set's, the 16x16 FC and BERT layers') in the model's order | dram_request_cycles 2.35, llc_miss_cycles "
    "7.93, loss 14.315 | 9.42% / 0.99597, library 10.29%, 0.57x-1.61x | 9.83% / 0.99549, library 10.85%, "
    "0.55x-1.65x | 10.07% / 0.99568, library 10.91%, 0.54x-1.61x | 10.69% / 0.99603, library 10.98%, 0.58x-1.68x |",
    "",
    "U4 is T4 done properly and the closest variant: it lowers the loss by 0.80 (T4: 0.63), brings every 16x16 run "
    "within 1.8x held out both ways (0.57x-1.63x; U-Net's 448-call C1024_K1024_P28 mapping 0.54x / 0.55x -> "
    "0.57x / 0.58x) and the library runs improve in-sample and on both splits, but DOSA's mappings held out by network stay at 10.05% "
    "(beyond the 10% target; Spearman 0.99594 -> 0.99588), and the 16x16 runs predicted from the 128x128 set alone "
    "go from 10.72% to 12.19% (library 11.61% -> 13.83%). By network the fold's ResNet-50 mappings go from 10.0% "
    "to 10.7% (BERT 14.5% -> 13.3%, U-Net 11.7% -> 11.1%): with the 128x128 FC layers' shared weight blocks "
    "counted, `dram_request_cycles` fits to 2.50 (was 1.41) and ResNet-50's FC mappings (C2048_K1000, 2 MB of "
    "weights between the L2 and the LLC) move from 1.04-1.11x to 1.24-1.32x. Under the shipped parameters the "
    "harness's order alone moves DOSA's convolution mappings in-sample from 9.09% to 8.96% (both_unet's "
    "C256_K256_P136 0.89x -> 0.99x, its 8,064-call C1024_K1024_P28 1.18x -> 1.10x), and it lowers the loss of "
    "every variant (U4 14.10 against 14.54 with the convolutions in the model's order), so the order is right "
    "though its refit costs the by-network split a little. The convolutions' neighbour rule does not help "
    "(U2, U3, U5: every DOSA-mapping MAPE of the 16x16 splits up; not analysed further in the time). T1 on top of U4 fits to 10.5 cycles, barely binds "
    "and leaves 10.04% (held at round 14's 11.9 instead of fitted, 9.74% / 9.99%: a value neither measured nor "
    "fitted, so not a candidate). None meets every target, so the model is unchanged. Shipping U4 would also "
    "need the emulator's counterpart of the neighbour rule (64-byte blocks, not rows, in gemmini_emu.c's "
    "`far_prev`) and an answer for the 128x128-only column. What is left is the by-network split's 0.05 points, "
    "which in U4 come from the parameters' shift, not from a row: a term that separates the FC layers' "
    "LLC-served weight reads (ResNet-50's) from the 128x128 FC layers' DRAM-served ones would be the next lead.",
    "",
    "Seventeenth round (issue 25, branch cost25s): that lead screened on U4, not shipped. The model already splits a "
    "strided request that misses the L2 (`dram_req`, served by the LLC, `dram_request_cycles`) from the share the "
    "LLC misses too (`far_req`, served by DRAM, `llc_miss_cycles` more; `_beyond_l2` at llc_bytes, hardware "
    "sizes), and U4's tiled_matmul neighbour rule lowered both by the (L2, LLC) shares 1 - exp(-D / cache). "
    "Three ways of confining the rule, none with a parameter of its own, same protocol as the sixteenth round "
    "(one fit from the shipped parameters, every fold from it; cells as above):",
    "",
    "| variant | fitted | in-sample | by configuration | by network | fitted on 128x128 only |",
    "|---|---:|---|---|---|---|",
    "| V1: U4, the rule on the requests DRAM serves only (`far_req`; the L2 misses the LLC serves counted as in U1) | "
    "dram_request_cycles 1.88, llc_miss_cycles 8.51, loss 14.644 | 9.36% / 0.99608, library 10.33%, 0.57x-1.63x | "
    "9.81% / 0.99568, library 10.91%, 0.56x-1.67x | 10.12% / 0.99596, library 11.02%, 0.58x-1.62x | 12.71% / "
    "0.99607, library 14.28%, 0.64x-1.72x |",
    "| V2: U4, the rule only on operands larger than the LLC (both caches' shares; an LLC-served operand as in U1) | "
    "dram_request_cycles 1.89, llc_miss_cycles 8.57, loss 14.638 | 9.36% / 0.99608, library 10.33%, 0.57x-1.63x | "
    "9.81% / 0.99567, library 10.91%, 0.56x-1.67x | 10.13% / 0.99595, library 11.05%, 0.58x-1.62x | 12.74% / "
    "0.99602, library 14.36%, 0.64x-1.71x |",
    "| V3: U4, the rule on the L2 misses only (`dram_req`; the LLC's misses as in U1) | dram_request_cycles 2.50, "
    "llc_miss_cycles 7.88, loss 14.157 (the same from 4 restarts; with T1 on top far_slot_cycles fits to 10.1 "
    "and changes nothing) | 9.37% / 0.99595, library 10.29%, 0.57x-1.60x | 9.78% / 0.99545, library 10.86%, "
    "0.56x-1.64x | 9.99% / 0.99568, library 10.90%, **0.54x**-1.63x | 10.52% / 0.99604, library 10.90%, "
    "0.58x-1.66x |",
    "| U4 again, 4 restarts (bench/costmodel.py's fit) | dram_request_cycles 2.50, llc_miss_cycles 8.34, loss "
    "14.102 | 9.37% / 0.99597, library 10.30%, 0.58x-1.60x | 9.79% / 0.99554, library 10.90%, 0.57x-1.63x | "
    "10.05% / 0.99588, library 10.96%, 0.57x-1.63x | 12.17% / 0.99585, library 13.81%, 0.64x-1.67x |",
    "",
    "The FC layers are not the lever the sixteenth round took them for. ResNet-50's C2048_K1000 (16x16) is "
    "over-predicted under DOSA's mappings (held out by network 1.24x / 1.32x in U4) but under-predicted under the "
    "library's own tiler (0.77x in U4, 0.65x as shipped): the same layer, the same weights in the LLC, misses in "
    "opposite directions, so no LLC-versus-DRAM split of its weight reads can fix both. V1 and V2 keep "
    "`dram_request_cycles` at U1's 1.9 and bring those mappings to 1.13x-1.21x (library 0.70x), but lose the L2-level "
    "neighbour hits BERT's matmuls need (BERT's DOSA mappings held out by network 13.3% in U4 -> 15.2%), so the "
    "split gets worse (10.12% / 10.13%) and the 128x128-only column too (12.7%). V3 is the reverse: the by-network "
    "split lands at 9.99% and the 128x128-only column improves on the shipped model (10.72% -> 10.52%, library "
    "11.61% -> 10.90%), but `llc_miss_cycles` fits lower (7.88) and U-Net's library run C64_K2_P388 (a 2-channel "
    "output, DRAM-bound) drops to 0.54x held out by network, outside 1.8x; and V3 has no physical reading (a block "
    "the neighbour tile just read would be kept by the L2 but not by the larger LLC). A 9.99% scratch log of U4 "
    "left by the sixteenth round does not reproduce from its patch (10.05% here). None meets every target; the "
    "model is unchanged. What separates the two kinds of FC run, under the shipped parameters: the library's "
    "tiler runs C2048_K1000 as 24 calls of 1 x 128 x 896 (weight rows of 128 bytes out of each 1000-byte row) "
    "and FireSim measures 510,617-512,599 cycles; DOSA's mappings run 24 calls of 1 x 496 x 256 or 32 of "
    "1 x 992 x 128 (rows of 496 / 992 contiguous bytes) and measure 300,642-321,284; the model predicts "
    "about 333,000 for all six (0.65x and 1.04x-1.11x). Both read the 2 MB of weights once, in about as many "
    "requests (62,500 against 60,900 in the model, all L2 misses the LLC serves), so the missing mechanism depends on how many contiguous bytes of a strided row a tile "
    "reads (e.g. DRAM row-buffer locality, or per-row request overhead in the DMA), not on the cache level "
    "that serves the weights. The simplest such term, screened on the shipped model (W1: each L2-missing strided "
    "row of a tiled_matmul tile costs N more requests' wait, no parameter of its own, N = 2 / 6), is rejected by "
    "the fit: `dram_request_cycles` refits to 0.71 / 0.21, the loss rises 14.91 -> 15.48 / 15.92, every split gets "
    "worse (by configuration 10.05% / 10.39%, by network 10.33% / 10.71%, BERT's mappings held out by network "
    "16.4% / 17.1%) and the FC pair stays apart (library 0.61x / 0.56x, mappings 0.94x-1.00x / 0.87x-0.92x): a "
    "cost per row in DRAM-wait units is not it, and the 510k cycles of the library's run remain unexplained. "
    "Next: the library's tiled_matmul_auto run of a one-row A (its tile search, its A and D padding, its calls' "
    "issue order) against the same layer's DOSA run, read from the library's source before any model term.",
    "",
    "Eighteenth round (issue 25, branch cost25t): the contiguous bytes of a strided row, screened, not shipped. "
    "Gemmini's DMA moves a row as mvin pieces of at most max_block_len x DIM elements (64 B at DIM 16, int8), one "
    "request per 64-byte block a piece touches (`_row_req`), so the pieces of one unaligned row share their boundary "
    "blocks: a 496-byte DOSA weight row of C2048_K1000 (offsets 40 x row mod 64) is 14.75 requests over 8.6 distinct "
    "blocks, the library's 128-byte row 3.75 over 2.9 (a row's mean over the offsets). X1: a strided tiled_matmul row misses the L2 "
    "(`dram_req`, `far_req`) once per distinct 64-byte block it touches, not once per request (the second piece's "
    "request to a block the first just fetched hits the L2, 16 rows later); the DMA still issues every request "
    "(`ld_req` unchanged); no parameter of its own, REQUEST_BYTES and max_block_len hardware facts. X2: X1 on B "
    "(the weights) only. Same protocol as the sixteenth round (~25 s a variant):",
    "",
    "| variant | fitted | in-sample | by configuration | by network | fitted on 128x128 only |",
    "|---|---:|---|---|---|---|",
    "| none (the model as shipped) | loss 14.906 | 9.35% / 0.99612, library 10.45%, 0.55x-1.64x | 9.78% / 0.99556, "
    "library 10.99%, **0.54x**-1.68x | 10.00% / 0.99594, library 11.06%, **0.55x**-1.63x | 10.72% / 0.99651, library "
    "11.61%, 0.60x-1.72x |",
    "| X1: a strided matmul row's L2 / LLC misses per distinct block | dram_request_cycles 1.48, llc_miss_cycles "
    "8.38, loss 14.914 | 9.32% / 0.99616, library 10.44%, 0.55x-1.64x | 9.75% / 0.99557, library 10.97%, "
    "**0.54x**-1.68x | 9.96% / 0.99591, library 11.01%, **0.55x**-1.63x | 10.72% / 0.99645, library 11.46%, "
    "0.60x-1.72x |",
    "| X2: X1 on B only | identical to X1 to every printed digit (no A row of these runs is strided and beyond the "
    "L2) | | | | |",
    "",
    "X1 moves ResNet-50's C2048_K1000 the wrong way for the pair: DOSA's mappings 1.04x-1.11x -> 0.94x-1.00x held out "
    "by configuration, the library's run 0.64x-0.65x -> 0.61x-0.62x; every split moves by under 0.05 points and the "
    "1.8x bound is still broken by the same run. That run is not an FC layer: on both splits the only 16x16 run "
    "outside 1.8x is U-Net's C1024_K1024_P28_Q28_R3_S3 under dnn_unet's DOSA mapping (L3 K64 Q7; 448 calls of a "
    "3x3x1024 x 16-channel weight tile, 9,216 weight rows of 16 contiguous bytes out of each 1024-byte row, the "
    "9.4 MB of weights beyond the LLC): measured 108.9M cycles, predicted 60.3M (0.54x / 0.55x held out, 0.60x "
    "fitted on 128x128 only). The same layer's other DOSA mappings read weight rows of the same 16 contiguous bytes "
    "and are missed the other way or less: analytical_unet (L3 K64 Q2 P7, 896 calls, the weight tile reused by 14 "
    "consecutive calls) 0.72x, both_unet (L3 C2 Q7 S3 R3 K64, 8,064 calls of a 1x1 x 512 x 16 tile) 1.17x. Measured "
    "cycles per 16-byte weight row read: dnn 26.4, analytical 19.3, both 20.8; predicted 14.6, 13.6, 24.5. So no "
    "per-row cost in the contiguous bytes of a row (the seventeenth round's lead; W1, in DRAM-wait units, the same) can "
    "bring dnn_unet within 1.8x: it adds the same cycles per 16-byte row to both_unet, already over-predicted, and "
    "the FC pair it was meant for is inside the bound (0.64x-1.11x). None meets every target; the model is "
    "unchanged. Next: what makes dnn_unet's 16-byte weight rows cost 26 cycles against both_unet's 21 and "
    "analytical_unet's 19. In the model's DRAM order (reductions innermost) both dnn_unet's and both_unet's weight "
    "tiles change every call, but dnn_unet reads 9,216 weight rows a call in 448 calls, both_unet 512 in 8,064, "
    "and the model sends 3.77M of dnn_unet's 4.18M L2-missing requests to DRAM (`far_req`) against 3.78M of "
    "both_unet's 6.48M: compare the runs' DRAM page reuse and the LLC share per call (a long call's weight tile, "
    "147 KB, against a short one's 8 KB) before any model term. "
    "The pattern over every 16x16 convolution run whose weight tile is 16 channels of a tensor beyond the LLC "
    "(held out by configuration, as shipped): by weight rows a call, 512 (both_unet's DOSA mappings) 1.15x-1.17x; "
    "1,536-1,584 (both_unet's C512_K1024 mapping, the library's 9 runs) 0.70x-1.10x; 9,216 (analytical_unet's and "
    "dnn_unet's mappings) 0.54x-1.00x; and within the two larger groups the layers whose weight rows are 1024 B apart (K1024) "
    "lower than those 512 B apart (K512): C1024_K1024 0.54x / 0.72x / 0.70x (dnn_unet's and analytical_unet's mappings, the library on dnn_unet's) against C1024_K512 0.74x / 1.00x / "
    "0.93x. Under-prediction grows with the DRAM span a call's narrow weight rows cover (rows x row pitch), "
    "the sign of DRAM pages opened per 16 useful bytes, which neither a request nor a row count sees.",
    "",
    "Nineteenth round (issue 25, branch cost25u): DRAM pages opened per useful byte, screened, not shipped. U: a "
    "tiled_conv call's strided weight rows that DRAM serves (`far_req`'s W share: a 16-channel tile of a tensor beyond "
    "the LLC) open rows x min(1, pitch / page) DRAM pages (pitch: a weight row's K elements, page: PG_B bytes), each "
    "waiting F `dram_request_cycles` more (added to `dram_req`); F chosen on a small grid, every other parameter refitted. "
    "FASED's DDR3 page size was not checked against its source here; it does not matter on these runs: no such weight "
    "row is a page or more apart, so only F / page is identified (PG_B 1024 F 2, 2048 F 4 and 8192 F 16 agree to every "
    "printed digit). Same protocol as the sixteenth round (~12 s a variant); MAPE / Spearman of DOSA's mappings, the "
    "library's MAPE, the range of predicted / measured over all runs:",
    "",
    "| variant | fitted | by configuration | by network | fitted on 128x128 only |",
    "|---|---:|---|---|---|",
    "| none (the model as shipped) | loss 14.906 | 9.78% / 0.99556, library 10.99%, **0.54x**-1.68x | 9.996% / 0.99594, "
    "library 11.06%, **0.55x**-1.63x | 10.72% / 0.99651, library 11.61%, 0.60x-1.72x |",
    "| U, F 2 per 2 KiB (1 request's wait per KiB of span) | loss 14.882, dram_request_cycles 1.42, llc_miss_cycles "
    "8.25 | 9.79% / 0.99560, library 10.92%, 0.59x-1.68x | 9.988% / 0.99595, library 10.98%, 0.58x-1.63x | 10.74% / "
    "0.99645, library 11.51%, 0.62x-1.72x |",
    "| U, F 3 per 2 KiB | loss 14.873 | 9.79% / 0.99553, library 10.89%, 0.60x-1.67x | 9.995% / 0.99594, library "
    "10.94%, 0.58x-1.63x | 10.79% / 0.99649, library 11.52%, 0.62x-1.72x |",
    "| U, F 4 per 2 KiB | loss 14.867, llc_miss_cycles 8.15 | 9.81% / 0.99551, library 10.86%, 0.60x-1.67x | "
    "**10.01%** / 0.99591, library 10.91%, 0.58x-1.63x | 10.79% / 0.99647, library 11.49%, 0.62x-1.72x |",
    "| U, F 8 per 2 KiB | loss 14.870 | 9.90% / 0.99539, library 10.83%, 0.60x-1.68x | **10.09%** / 0.99574, library "
    "10.87%, 0.57x-1.63x | 10.91% / 0.99646, library 11.57%, 0.62x-1.72x |",
    "| U, F 16 per 2 KiB | loss 14.982 | **10.20%** / 0.99506, library 10.96%, 0.60x-1.69x | **10.42%** / 0.99546, "
    "library 11.14%, 0.56x-1.65x | 11.33% / 0.99606, library 11.79%, 0.62x-1.72x |",
    "",
    "With F 2 or 3 every held-out target of bench/costmodel.py is met on both 16x16 splits as screened (DOSA's mappings "
    "<= 10% and Spearman >= 0.993, the library <= 12%, every run within 1.8x), by margins of hundredths: by network "
    "9.988% / 9.995% against 10%, and the lowest runs 0.58x-0.60x against 0.556x, now the library's both_unet "
    "C64_K2 (by network) and both_resnet50 C512_K512 R3 s2 runs, no longer U-Net's C1024_K1024. That run, held out by "
    "configuration / by network: dnn_unet's DOSA mapping 0.54x/0.55x -> 0.59x/0.59x (F 2), 0.61x/0.61x (F 3), "
    "0.63x/0.64x (F 4); analytical_unet's 0.72x/0.70x -> 0.78x/0.76x (F 2); the library on dnn_unet's 0.70x/0.71x -> "
    "0.73x/0.74x; but both_unet's DOSA mapping, over-predicted already, 1.17x/1.16x -> 1.23x/1.22x (F 2), 1.29x/1.27x (F 4): "
    "the term charges its 512-row calls the same per KiB of span. The fitted cost is small, about 1.4-2.1 cycles per "
    "KiB of span (2.8-4.3 cycles a 2 KiB page), far below a DDR3 row miss, and dnn_unet's deficit (about 12 cycles per "
    "16-byte weight row) is mostly still there: the term moves the run across the bound, it does not explain it. "
    "Not shipped (no time for the bench and tests this round). Next: ship U at F 2 (one page-cost parameter, or F / "
    "page fixed) only after bench/costmodel.py's own refits confirm the margins; the cause of dnn_unet's remaining "
    "deficit against both_unet's surplus (9,216 rows a call against 512) still needs the runs' DRAM page reuse: a term "
    "growing with a call's rows (pages beyond what the banks keep open), not with its span alone.",
    "",
]


def run_facts(run: FireSimRun, x: np.ndarray) -> dict[str, float]:
    """What the model reads of one run, as numbers to group residuals by."""
    arch = run.hardware.resolve(run.mapping.dataflow)
    e = execution_from_mapping(run.problem, arch, run.mapping)
    col = {name: x[:, i] for i, name in enumerate(FEATURE_COLUMNS)}
    n = col["count"]
    req = float(((col["ld_req"] + col["st_req"]) * n).sum())
    moved = float(((col["ld_bytes"] + col["st_bytes"]) * n).sum())
    c = cycles_from_calls(x, DEFAULT_PARAMS)
    if e.kind == "conv":
        rows = (min(e.t_c, e.c) * e.in_bytes, min(e.t_k, e.k) * e.in_bytes, min(e.t_k, e.k, e.cols) * e.out_bytes)
    else:  # tiles in DIM-blocks
        rows = (min(e.t_c * e.rows, e.c) * e.in_bytes, min(e.t_k * e.cols, e.k) * e.in_bytes,
                min(e.t_k * e.cols, e.k, e.cols) * e.out_bytes)
    acc = re.search(r"acc(\d+)x", run.config)
    return {
        "narrowest DRAM row (B)": float(min(rows)),
        "bytes per DMA request": moved / max(req, 1.0),
        "accumulator rows": float(acc.group(1)) if acc else float("nan"),
        "stride": float(run.problem.stride[0]),
        "calls": float(n.sum()),
        "tensors beyond the L2": float(sum(_beyond_l2(e, t) for t in ("I", "W", "O"))),
        "model's DMA share": c.dma / max(c.dma + c.execute, 1.0),
        "kernel": float(e.r),
    }


def l2_label(run: FireSimRun) -> str:
    """The run's kind and which of I, W, O exceed the L2, each marked s when the call moves strided rows of it."""
    e = execution_from_mapping(run.problem, run.hardware.resolve(run.mapping.dataflow), run.mapping)
    strided = {"I": e.t_c < e.c, "W": e.t_k < e.k, "O": e.t_k < e.k}
    if e.kind == "matmul":  # tiles in DIM-blocks
        strided = {"I": e.t_c * e.rows < e.c, "W": e.t_k * e.cols < e.k, "O": e.t_k * e.cols < e.k}
    big = " ".join(t + ("s" if strided[t] else "") for t in ("I", "W", "O") if _beyond_l2(e, t)) or "none"
    return f"{run.kind} {e.kind}: {big}"


def channel_tile_label(run: FireSimRun) -> str:
    """The run's kind and its call's input-channel tile: the whole layer's, a multiple of DIM, or neither (the last
    block of each tile partial: tiled_conv_auto's 120 of 2048)."""
    e = execution_from_mapping(run.problem, run.hardware.resolve(run.mapping.dataflow), run.mapping)
    tile = min(e.t_c * (e.rows if e.kind == "matmul" else 1), e.c)
    what = "whole" if tile >= e.c else ("a multiple of DIM" if tile % e.rows == 0 else "not a multiple of DIM")
    return f"{run.kind} {e.kind}: {what}"


def stride_kernel_label(run: FireSimRun) -> str:
    return f"{run.kind}: stride {run.problem.stride[0]}, kernel {run.problem.dims['R']}"


BINS: dict[str, list[float]] = {
    "narrowest DRAM row (B)": [0, 2, 4, 8, 16, 32, 64, 1e9],
    "bytes per DMA request": [0, 4, 8, 16, 32, 48, 64.5],
    "accumulator rows": [0, 400, 600, 1000, 1600, 2000, 3000, 1e9],
    "stride": [0, 1.5, 1e9],
    "calls": [0, 2, 10, 50, 200, 1000, 1e9],
    "tensors beyond the L2": [-0.5, 0.5, 1.5, 2.5, 3.5],
    "model's DMA share": [0, 0.25, 0.5, 0.75, 1.01],
    "kernel": [0, 1.5, 3.5, 1e9],
}


def bucket_label(lo: float, hi: float) -> str:
    if hi >= 1e8:
        return f">= {lo:g}"
    return f"[{lo:g}, {hi:g})"


def table(d: Dataset, preds: dict[str, np.ndarray], labels: np.ndarray, order: list[str], what: str) -> list[str]:
    names = list(preds)
    head = f"| {what} | runs | " + " | ".join(f"{n}: bias | MAPE | worst" for n in names) + " |"
    lines = [head, "|---|---:|" + "---:|---:|---:|" * len(names)]
    for g in order:
        m = labels == g
        if not m.any():
            continue
        cells = []
        for p in preds.values():
            lr = np.log(p[m] / d.y[m])
            worst = lr[np.argmax(np.abs(lr))]
            cells.append(f"{lr.mean():+.2f} | {np.mean(np.abs(p[m] - d.y[m]) / d.y[m]) * 100:.1f}% | {np.exp(worst):.2f}x")
        lines.append(f"| {g} | {int(m.sum())} | " + " | ".join(cells) + " |")
    return lines


def indistinguishable(d: Dataset, preds: dict[str, np.ndarray]) -> list[str]:
    """Runs the model cannot tell apart: the same kind of run of the same layer with identical call features (so the
    same prediction under any parameters), measured on several configurations. Per kind: how many such runs, the
    largest spread (slowest / fastest of a group), and the floor their spread puts under MAPE (each group predicted
    by the one number that minimises its mean APE; runs alone in their group count 0)."""
    groups: dict[tuple[str, str, bytes], list[int]] = {}
    for i, (r, x) in enumerate(zip(d.runs, d.x.blocks)):
        groups.setdefault((r.kind, r.layer_key, x.tobytes()), []).append(i)
    lines = ["| kind | runs | in groups of identical features | groups | largest spread | MAPE floor over all runs |",
             "|---|---:|---:|---:|---:|---:|"]
    for kind in ("mapping", "library"):
        mine = [ii for (k, _, _), ii in groups.items() if k == kind]
        shared = [ii for ii in mine if len(ii) > 1]
        floor = 0.0
        for ii in shared:  # the mean-APE-optimal constant is one of the measured values (a weighted median)
            y = d.y[ii]
            floor += min(float(np.sum(np.abs(c - y) / y)) for c in y)
        n = sum(len(ii) for ii in mine)
        if not n:
            continue
        spread = max((float(d.y[ii].max() / d.y[ii].min()) for ii in shared), default=1.0)
        lines.append(f"| {kind} | {n} | {sum(len(ii) for ii in shared)} | {len(shared)} | {spread:.2f}x | "
                     f"{floor / n * 100:.1f}% |")
    # per configuration: how far its runs sit from the mean of their group (log; identical calls elsewhere)
    offsets: dict[str, list[float]] = {}
    for ii in groups.values():
        if len(ii) > 1:
            ly = np.log(d.y[ii])
            for i, v in zip(ii, ly - ly.mean()):
                offsets.setdefault(d.runs[i].config, []).append(float(v))
    lines += ["", "| configuration | runs with a twin elsewhere | mean log(measured / their group's geometric mean) |",
              "|---|---:|---:|"]
    lines += [f"| {c} | {len(v)} | {np.mean(v):+.3f} |" for c, v in sorted(offsets.items())]
    worst = sorted((float(d.y[ii].max() / d.y[ii].min()), ii) for ii in groups.values() if len(ii) > 1)[::-1][:6]
    lines += ["", "| spread | run | layer | measured (configuration) | predicted held out by configuration |",
              "|---:|---|---|---|---|"]
    for spread, ii in worst:
        r = d.runs[ii[0]]
        meas = ", ".join(f"{d.y[i]:,.0f} ({d.runs[i].config})" for i in ii)
        pred = ", ".join(f"{preds['by configuration'][i]:,.0f}" for i in ii)
        lines.append(f"| {spread:.2f}x | {r.kind} | {r.layer_key} | {meas} | {pred} |")
    return lines


def _same_call_groups(d: Dataset, strict: bool) -> list[list[int]]:
    """Groups (two or more runs) of one kind and layer with identical call features: the model's inputs are the same,
    so is its prediction under any parameters. `strict` also asks for what the hardware could feel beyond the
    calls: a DOSA mapping's DRAM-level loop order (the order of the calls; its inner levels are loop_conv_ws's own
    order, which the mapping does not set) or the library's recorded tile; what is left differs only in the
    configuration's buffer sizes, which such a call does not touch, or in the file it ran in."""
    groups: dict[tuple, list[int]] = {}
    for i, (r, x) in enumerate(zip(d.runs, d.x.blocks)):
        key: tuple = (r.kind, r.layer_key, x.tobytes())
        if strict:
            key += (r.mapping_text.split(" - ")[0] if r.kind == "mapping" else str(sorted((r.library_tile or {}).items())),)
        groups.setdefault(key, []).append(i)
    return [ii for ii in groups.values() if len(ii) > 1]


def _floor_stats(d: Dataset, groups: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per run: the APE of the best constant of its group (0 when alone), whether it has a twin, and its deviation
    from its group's mean log cycles scaled by sqrt(n / (n - 1)) (an unbiased sample of the run-to-run noise)."""
    best, twin, dev = np.zeros(len(d.y)), np.zeros(len(d.y), bool), np.full(len(d.y), np.nan)
    for ii in groups:
        y = d.y[ii]
        c = min(y, key=lambda c: float(np.sum(np.abs(c - y) / y)))  # the mean-APE-optimal constant is a measured value
        best[ii], twin[ii] = np.abs(c - y) / y, True
        ly = np.log(y)
        dev[ii] = (ly - ly.mean()) * np.sqrt(len(ii) / (len(ii) - 1))
    return best, twin, dev


def noise_floor(art: Dataset, rand: Dataset, preds: dict[str, np.ndarray]) -> list[str]:
    """The noise floor: how far apart runs measure that no model of the call can tell apart, and the MAPE the best
    per-group predictor reaches (each group predicted by the one number minimising its mean APE), per kind of run
    and per network, against the held-out model and the targets of issue 25."""
    kinds = np.array([r.kind for r in art.runs])
    nets = np.array([r.network for r in art.runs])
    subsets = [(k, kinds == k) for k in ("mapping", "library")]
    subsets += [(f"{k}, {n}", (kinds == k) & (nets == n)) for k in ("mapping", "library") for n in sorted(set(nets))]
    out: list[str] = []
    stats = {strict: _floor_stats(art, _same_call_groups(art, strict)) for strict in (True, False)}
    out += ["| runs | n | the same call: runs with a twin | largest spread | best per-group predictor's MAPE, all "
            "runs (alone: 0) | its MAPE on the twinned runs | noise (sd of log cycles) | an oracle's MAPE (the "
            "noise alone) | identical model inputs only: twinned | best predictor's MAPE, all runs | held out by "
            "configuration: model's MAPE | by network |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    spreads = {}
    for strict in (True, False):
        spreads[strict] = {k: 1.0 for k in ("mapping", "library")}
        for ii in _same_call_groups(art, strict):
            k = art.runs[ii[0]].kind
            spreads[strict][k] = max(spreads[strict][k], float(art.y[ii].max() / art.y[ii].min()))
    for name, m in subsets:
        best, twin, dev = stats[True]
        t = m & twin
        sd = float(np.sqrt(np.mean(dev[t] ** 2))) if t.any() else float("nan")
        oracle = float(np.mean(np.abs(np.exp(-dev[t]) - 1))) if t.any() else float("nan")
        lbest, ltwin, _ = stats[False]
        ape = {s: float(np.mean(np.abs(p[m] - art.y[m]) / art.y[m])) for s, p in preds.items()}
        spread = ""
        if name in spreads[True]:
            spread = f"{spreads[True][name]:.2f}x"
        out.append(f"| {name} | {int(m.sum())} | {int(t.sum())} | {spread} | {best[m].mean() * 100:.1f}% | "
                   + (f"{best[t].mean() * 100:.1f}% | {sd:.3f} | {oracle * 100:.1f}%" if t.any() else "- | - | -")
                   + f" | {int((m & ltwin).sum())} | {lbest[m].mean() * 100:.1f}% | "
                   f"{ape['by configuration'] * 100:.1f}% | {ape['by network'] * 100:.1f}% |")
    # the 128x128 random-mapping set: one configuration, so a twin there differs only in its DRAM-level loop order
    rb, rt, rd = _floor_stats(rand, _same_call_groups(rand, False))
    out.append(f"| 128x128 random mappings (one configuration; identical model inputs, DRAM-level loop orders differ) | "
               f"{len(rand.y)} | {int(rt.sum())} | {max(float(rand.y[ii].max() / rand.y[ii].min()) for ii in _same_call_groups(rand, False)):.2f}x "
               f"| {rb.mean() * 100:.1f}% | {rb[rt].mean() * 100:.1f}% | {np.sqrt(np.nanmean(rd[rt] ** 2)):.3f} | "
               f"{np.mean(np.abs(np.exp(-rd[rt]) - 1)) * 100:.1f}% | {int(rt.sum())} | {rb.mean() * 100:.1f}% | - | - |")
    # how much of the held-out error is spread within groups of the same call (no term of the call removes it)
    best, twin, dev = stats[True]
    share = []
    for s, p in preds.items():
        for k in ("mapping", "library"):
            m = (kinds == k) & twin
            lr = np.log(p / art.y)
            within = 0.0
            for ii in _same_call_groups(art, True):
                if art.runs[ii[0]].kind == k:
                    within += float(np.sum((lr[ii] - lr[ii].mean()) ** 2))
            share.append(f"{k} runs held out {s}: {within / float(np.sum(lr[m] ** 2)) * 100:.0f}% "
                         f"(of {int(m.sum())} twinned runs' squared log error)")
    out += ["", "Of the held-out squared log error of the twinned runs, the part within their groups (which no "
            "prediction of the call can remove): " + "; ".join(share) + "."]
    # the twins' spread by where they ran: the same network's files on other configurations, or another network's
    # (other layers before them in the binary)
    pairs = []
    for k in ("mapping", "library"):
        same: list[float] = []
        cross: list[float] = []
        for ii in _same_call_groups(art, True):
            if art.runs[ii[0]].kind != k:
                continue
            for a, i in enumerate(ii):
                for j in ii[a + 1:]:
                    v = float(np.log(art.y[i] / art.y[j]) ** 2 / 2)  # a pair's share of the run-to-run variance
                    (same if art.runs[i].network == art.runs[j].network else cross).append(v)
        pairs.append(f"{k} runs {np.sqrt(np.mean(same)):.3f} over {len(same)} pairs in the same network's files, "
                     f"{np.sqrt(np.mean(cross)):.3f} over {len(cross)} pairs in two networks' files" if cross else "")
    repeats = [ii for ii in _same_call_groups(rand, True)]
    rep = "; ".join(", ".join(f"{rand.y[i]:,.0f}" for i in ii) for ii in repeats)
    out += ["", "Noise (sd of log cycles) between twins by where they ran: " + "; ".join(p for p in pairs if p)
            + f". In the one configuration of the 128x128 set, {len(repeats)} group(s) of runs with the same calls "
            f"in the same DRAM-level order (mappings that differ only inside a call) measure {rep} cycles."]
    # the targets against the floor
    ms, ls = spreads[True]["mapping"], spreads[True]["library"]
    mb, mt, md = best[kinds == "mapping"], twin[kinds == "mapping"], dev[kinds == "mapping"]
    lb, lt, ld = best[kinds == "library"], twin[kinds == "library"], dev[kinds == "library"]
    om = float(np.mean(np.abs(np.exp(-md[mt]) - 1)))
    ol = float(np.mean(np.abs(np.exp(-ld[lt]) - 1)))
    out += ["", "| target of issue 25 | held out now | floor: best per-group predictor (all runs) | noise alone "
            "(an oracle, the twins' noise on every run) | can the floor alone break it? |", "|---|---:|---:|---:|---|"]
    for tname, tv, floor_v, oracle_v, now in (
        ("DOSA mappings <= 10% MAPE (by configuration, by network)", 0.10, mb.mean(), om,
         " / ".join(f"{np.mean(np.abs(p[kinds == 'mapping'] - art.y[kinds == 'mapping']) / art.y[kinds == 'mapping']) * 100:.1f}%" for p in preds.values())),
        ("library runs <= 12% MAPE", 0.12, lb.mean(), ol,
         " / ".join(f"{np.mean(np.abs(p[kinds == 'library'] - art.y[kinds == 'library']) / art.y[kinds == 'library']) * 100:.1f}%" for p in preds.values())),
    ):
        out.append(f"| {tname} | {now} | {floor_v * 100:.1f}% | {oracle_v * 100:.1f}% | "
                   f"{'YES' if floor_v > tv else ('no' if oracle_v <= tv else 'only if the noise on the runs without a twin is as large')} |")
    worst = np.sqrt(max(ms, ls))
    out.append("| every run within 1.8x (predicted / measured) | " + " / ".join(
        f"{float((p / art.y).min()):.2f}x-{float((p / art.y).max()):.2f}x" for p in preds.values())
        + f" | {1 / worst:.2f}x-{worst:.2f}x (the widest group, {max(ms, ls):.2f}x, at its geometric mean) | - | "
        f"{'YES' if worst > 1.8 else 'no'} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--artifact", type=Path, default=DEFAULT_ARTIFACT)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "costmodel_residuals.md")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rand, art = random_mapping_dataset(args.data), artifact_dataset(sorted(args.artifact.glob("*.csv")))
    data = [rand, art]
    params = fit(data, DEFAULT_PARAMS)
    preds = {
        "by configuration": cross_validate(data, 1, params, groups=art.labels(lambda r: r.config)),
        "by network": cross_validate(data, 1, params, groups=art.labels(lambda r: r.network)),
    }
    facts = [run_facts(r, x) for r, x in zip(art.runs, art.x.blocks)]
    sections = []

    def by_label(title: str, fn: Callable[[FireSimRun], str]) -> None:
        lab = np.array([fn(r) for r in art.runs])
        sections.extend([f"### {title}", "", *table(art, preds, lab, sorted(set(lab)), title), ""])

    by_label("kind", lambda r: f"{r.kind} {r.op}")
    by_label("run, and the tensors larger than the L2 (s: its rows strided, a channel tile short of all channels)",
             l2_label)
    by_label("input-channel tile of a call", channel_tile_label)
    by_label("stride and kernel", stride_kernel_label)
    by_label("network", lambda r: r.network)
    by_label("configuration", lambda r: r.config)
    for name, edges in BINS.items():
        v = np.array([f[name] for f in facts])
        idx = np.clip(np.searchsorted(edges, v, side="right") - 1, 0, len(edges) - 2)
        labels = np.array([bucket_label(edges[i], edges[i + 1]) for i in idx])
        order = [bucket_label(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]
        for kind in ("mapping", "library"):
            km = np.array([r.kind == kind for r in art.runs])
            lab = np.where(km, labels, "")
            sections.extend([f"### {name}, {kind} runs", "", *table(art, preds, lab, order, name), ""])
    lines = [
        "# Held-out residuals of the Gemmini cost model on the 16x16 FireSim runs, by feature",
        "",
        "Generated by `PYTHONPATH=service python bench/costmodel_residuals.py` (the model and data of "
        "bench/costmodel.py). Cells per held-out split: bias = mean log(predicted / measured) (negative: the model is "
        "short), MAPE, and the worst ratio predicted / measured of the group. Each run is predicted by a fit without "
        "its configuration (by configuration) or without its network (by network), every parameter refitted.",
        "",
        "Features (`run_facts`): the narrowest DRAM row the DMA moves (input: the call's channel tile, weights: its "
        "output-channel tile, outputs: up to one DIM block of its channels; bytes), the bytes per DMA request the "
        "model counts, the configuration's accumulator rows, the stride, the calls, how many of I, W, O are larger "
        "than the 512 KiB L2, and the share of DMA in the model's DMA + execute time.",
        "",
        *FINDINGS,
        "",
        "### Runs the model cannot tell apart",
        "",
        "The same kind of run of the same layer with identical call features (so one prediction whatever the "
        "parameters), measured on several configurations; the spread within such a group is beyond any term of the "
        "call (`indistinguishable`):",
        "",
        *indistinguishable(art, preds),
        "",
        "### Noise floor",
        "",
        "FireSim is cycle-exact, so a run repeated is the same run; what moves a call's cycles without moving its "
        "features is where it ran: the configuration's file (each network's layers run back to back in one "
        "binary per configuration, on the same static buffers), never the buffer sizes themselves, which a call "
        "whose tile fits both does not touch. Twins: runs of one kind and layer with identical call features (the "
        "model's inputs, so one prediction under any parameters) and, for the hardware not to feel a difference "
        "either, the same DRAM-level loop order of a DOSA mapping (the order of the calls) or the same recorded "
        "tile of the library (`noise_floor`; `identical model inputs only` drops that condition). The best "
        "per-group predictor gives each group the one number that minimises its mean APE (a run without a twin "
        "costs it nothing, so this is a lower bound); the noise is the spread of log cycles within groups (sd, "
        "each deviation scaled by sqrt(n / (n - 1))), and an oracle that knew every run's noise-free cycles would "
        "still miss by that noise: its MAPE is the mean of |exp(-deviation) - 1| over the twins, i.e. what every "
        "run would cost if the runs without a twin were as noisy. Model columns: this bench's held-out "
        "predictions.",
        "",
        *noise_floor(art, rand, preds),
        "",
        *sections,
        f"({time.perf_counter() - t0:.0f} s)",
    ]
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
