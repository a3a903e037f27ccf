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
