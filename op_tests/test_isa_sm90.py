"""The sm_90a ISA checker's verdicts, on synthetic SASS and ptxas logs (no GPU, no nvcc needed).

The real compile + check runs in CI as `python -m dev.isa.check --arch sm_90a`; these tests
make sure that check can fail for each reason it names.
"""

from dev.isa.sm90 import evaluate

NAME = "_ZN5aiter4sm9026fp8_mqa_logits_sm90_kernelILi32EEEv14CUtensorMap_stS2_NS0_10KernelArgsE"
GOOD_LOG = f"""ptxas info    : Compiling entry function '{NAME}' for 'sm_90a'
ptxas info    : Function properties for {NAME}
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers
"""


def sass(body: str) -> str:
    return f"\n\tcode for sm_90a\n\t\tFunction : {NAME}\n{body}\n"


LOOP = """        /*0100*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR4], RZ, !UPT ;
        /*0110*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0120*/                   FADD R1, |R2|, R2 ;
        /*0130*/                   FFMA R3, R1, R4, R3 ;
        /*0140*/               @P0 BRA 0x100 ;
        /*0150*/                   EXIT ;"""


def test_clean_kernel_passes():
    failures, summary = evaluate(sass(LOOP), GOOD_LOG)
    assert failures == []
    assert any("QGMMA x1" in line for line in summary)
    assert any("FADD 1" in line and "FFMA 1" in line for line in summary)


def test_missing_qgmma_fails():
    failures, _ = evaluate(sass(LOOP.replace("QGMMA.64x128x32.F32.E4M3.E4M3", "HMMA.16816.F32")), GOOD_LOG)
    assert any("no QGMMA" in f for f in failures)


def test_local_memory_fails():
    failures, _ = evaluate(sass(LOOP + "\n        /*0160*/                   STL [R1], R14 ;"), GOOD_LOG)
    assert any("local memory" in f for f in failures)


def test_spills_fail():
    log = GOOD_LOG.replace("0 bytes spill stores, 0 bytes spill loads", "8 bytes spill stores, 8 bytes spill loads")
    failures, _ = evaluate(sass(LOOP), log)
    assert any("spills 8/8" in f for f in failures)


def test_serialised_wgmma_warning_fails():
    log = GOOD_LOG + ("ptxas info    : (C7518) Potential Performance Loss: wgmma.mma_async instructions are "
                      f"serialized due to program dependence in the function '{NAME}'\n")
    failures, _ = evaluate(sass(LOOP), log)
    assert any("C7518" in f for f in failures)


def test_no_kernel_fails():
    failures, _ = evaluate("", GOOD_LOG)
    assert any("no fp8_mqa_logits kernel" in f for f in failures)


PLAN = "_ZN5aiter4sm9017build_plan_kernelILi32EEEvNS_18Fp8MqaLogitsParamsENS0_13PlanWorkspaceEi"
PLAN_LOG = GOOD_LOG + f"""ptxas info    : Function properties for {PLAN}
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 56 registers
"""
PLAN_BODY = """        /*0000*/                   LDG.E R2, desc[UR4][R2.64] ;
        /*0010*/                   EXIT ;"""


def test_helper_kernel_needs_no_qgmma_but_no_spills():
    two = sass(LOOP) + f"\t\tFunction : {PLAN}\n{PLAN_BODY}\n"
    failures, summary = evaluate(two, PLAN_LOG)
    assert failures == [] and any(PLAN in line for line in summary)
    spilled = PLAN_LOG.replace(f"{PLAN}\n    0 bytes stack frame, 0 bytes spill stores",
                               f"{PLAN}\n    8 bytes stack frame, 8 bytes spill stores")
    failures, _ = evaluate(two, spilled)
    assert any(PLAN in f and "spills 8" in f for f in failures)


def test_relu_order_is_reported():
    _, summary = evaluate(sass(LOOP), GOOD_LOG)
    assert any("relu FADDs before the stage release: 1 of 1" in line for line in summary)
    late = LOOP.replace("FADD R1, |R2|, R2 ;", "FFMA R5, R6, R7, R5 ;").replace(
        "FFMA R3, R1, R4, R3 ;", "FADD R1, |R2|, R2 ;")
    _, summary = evaluate(sass(late), GOOD_LOG)
    assert any("relu FADDs before the stage release: 0 of 1" in line for line in summary)


# A math loop with every budget kind, a cold block (taken on a block's last tile), an out-of-line
# mbarrier retry and a backward vote loop inside: the steady path skips the cold block and takes no
# retry, and every instruction on it lands in its kind.
BUDGET_NAME = ("_ZN5aiter4sm9026fp8_mqa_logits_sm90_kernelILi32ELi128ENS_12LogitsFormatIfLb0EEEEEv14CUtensorMap_st"
               "S4_NS_18Fp8MqaLogitsParamsEPK4int2")
BUDGET_LOOP = """        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   ULEA UR24, UR7, UR22, 0x3 ;
        /*0020*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR24+0x290b8], R2 ;
        /*0030*/              @!P0 BRA 0x300 ;
        /*0040*/                   WARPGROUP.ARRIVE ;
        /*0050*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR8], RZ, !UPT ;
        /*0060*/                   UIADD3 UR10, UR16, 0x2, URZ ;
        /*0070*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24, gsb0 ;
        /*0080*/               @P3 BRA 0xc0 ;
        /*0090*/                   LDS R111, [UR8+0x29080] ;
        /*00a0*/                   LDS R110, [UR8+0x29088] ;
        /*00b0*/                   SHFL.IDX PT, R110, R110, RZ, 0x1f ;
        /*00c0*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*00d0*/                   FADD R123, R24, |R24| ;
        /*00e0*/                   FADD R25, R25, |R25| ;
        /*00f0*/                   FMNMX R26, R26, RZ, !PT ;
        /*0100*/                   VIMNMX.RELU R121, R121, UR15, PT ;
        /*0110*/                   FFMA R24, R8, R123, RZ ;
        /*0120*/                   FFMA R25, R9, R25, R24 ;
        /*0130*/                   FSEL R27, R61, R26, !P0 ;
        /*0140*/                   SHFL.BFLY PT, R27, R27, 0x2, 0x1f ;
        /*0150*/                   FADD R32, R24, R27 ;
        /*0160*/                   FMUL R25, R121, R32 ;
        /*0170*/                   FSEL R29, R25, -INF , P0 ;
        /*0180*/                   IMAD.WIDE R26, R33, 0x4, R114 ;
        /*0190*/                   IMAD.MOV.U32 R31, RZ, RZ, 0x4 ;
        /*01a0*/                   LEA R24, P6, R2, R26, 0x2 ;
        /*01b0*/               @P2 STG.E.EF desc[UR18][R26.64], R29 ;
        /*01c0*/               @!P5 SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR24+0x290f8], RZ ;
        /*01d0*/                   VOTEU.ANY UR4, UPT, PT ;
        /*01e0*/               @P0 BRA.U.ANY 0x1d0 ;
        /*01f0*/                   ISETP.NE.AND P0, PT, R2, RZ, PT ;
        /*0200*/              @!P0 EXIT ;
        /*0210*/                   BRA 0x10 ;
        /*0300*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR24+0x290b8], R2 ;
        /*0310*/              @!P0 BRA 0x300 ;
        /*0320*/                   BRA 0x30 ;"""


def test_budget_classifier_counts_a_planted_loop():
    from dev.isa.sm90 import BUDGET_KINDS, budget_table, classify, math_loop_budget

    budget = math_loop_budget(BUDGET_LOOP)
    expected = dict(mma=4, relu=3, weight_fma=2, head_reduction=3, kv_scale=1, stores=4, barriers=2, bookkeeping=11)
    assert dict(budget["steady"]) == expected and tuple(expected) == BUDGET_KINDS
    assert budget["cold"] == 3  # the two LDS and the SHFL of the block's last tile
    # The steady path's bookkeeping: ULEA, the retry branch (not taken), UIADD3, the skip branch,
    # VIMNMX (an integer clamp, not a relu), IMAD.MOV (a move, not address math), VOTEU, the vote
    # branch (not taken), ISETP, the predicated EXIT and the back edge.
    assert budget["ops"]["BRA"] == 4 and budget["ops"]["VIMNMX"] == 1 and budget["ops"]["IMAD"] == 1
    assert classify("FADD", "R1, R2, R3") == "head_reduction" and classify("FADD", "R1, |R2|, R2") == "relu"
    # The table names the kernel's H and D and its steady total.
    lines = budget_table({BUDGET_NAME: BUDGET_LOOP}, heads=(32,), head_dims=(128,))
    row = next(line for line in lines if line.startswith("  | 32 | 128 |"))
    assert f"| {sum(expected.values())} | 3 |" in row


def test_budget_needs_a_wgmma_loop():
    from dev.isa.sm90 import math_loop_budget

    assert math_loop_budget(BUDGET_LOOP.replace("QGMMA", "HMMA")) is None
    assert math_loop_budget(BUDGET_LOOP.replace("BRA 0x10 ;", "EXIT ;")) is None
