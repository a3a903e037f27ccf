"""The gfx950 ISA check's hazard, form and offset rules (dev/isa/gfx950_hazards.py) on planted
assembly: each violation is refused, and the same snippet with enough s_nop is accepted, so every
rule counts wait states exactly at its boundary. (CI runs the rules on all 48 compiled kernels:
python -m dev.isa.check --arch gfx950.)"""

from __future__ import annotations

import shutil

import pytest

import test_gfx950_isa_checker as base
from dev.isa import check as check_cli
from dev.isa import gfx950 as isa
from dev.isa import gfx950_hazards as hazards


def refused(snippet: str) -> list[hazards.Site]:
    """Violations in a snippet, parsed as a kernel body (labels and branches included)."""
    return hazards.violations(hazards.hazard_sites(isa.parse_blocks(snippet.splitlines())))


# Each rule: (the violation, the same with enough s_nop). The swap reads v4 and v5; the DMA reads
# s[0:3] and M0; the store reads s[8:11].
CASES = {
    "permlane-exec/v_cmpx": ("permlane-exec", """
	v_cmpx_gt_u32_e32 vcc, s0, v1
	s_nop 2
	v_permlane32_swap_b32 v4, v5
""", """
	v_cmpx_gt_u32_e32 vcc, s0, v1
	s_nop 3
	v_permlane32_swap_b32 v4, v5
"""),
    "permlane-exec/saveexec": ("permlane-exec", """
	s_and_saveexec_b64 s[6:7], vcc
	v_add_f32_e32 v9, v9, v9
	v_permlane16_swap_b32 v4, v5
""", """
	s_and_saveexec_b64 s[6:7], vcc
	v_add_f32_e32 v9, v9, v9
	s_nop 2
	v_permlane16_swap_b32 v4, v5
"""),
    # The branch target is reached from the branch (1 wait state) as well as from the fall-through
    # (1 + 8): the worse predecessor decides.
    "permlane-exec/branch-target": ("permlane-exec", """
	v_cmpx_gt_u32_e32 vcc, s0, v1
	s_cbranch_execz .LBB0_2
	s_nop 7
.LBB0_2:
	v_permlane32_swap_b32 v4, v5
""", """
	v_cmpx_gt_u32_e32 vcc, s0, v1
	s_nop 2
	s_cbranch_execz .LBB0_2
	s_nop 7
.LBB0_2:
	v_permlane32_swap_b32 v4, v5
"""),
    # A loop's back edge: the EXEC write at the end of one iteration reaches the next one's swap.
    "permlane-exec/back-edge": ("permlane-exec", """
	s_mov_b32 s20, 0
.LBB0_1:
	v_permlane32_swap_b32 v4, v5
	s_nop 7
	v_cmpx_gt_u32_e32 vcc, s0, v1
	s_cbranch_scc1 .LBB0_1
	s_endpgm
""", """
	s_mov_b32 s20, 0
.LBB0_1:
	v_permlane32_swap_b32 v4, v5
	s_nop 7
	v_cmpx_gt_u32_e32 vcc, s0, v1
	s_nop 2
	s_cbranch_scc1 .LBB0_1
	s_endpgm
"""),
    "permlane-vgpr": ("permlane-vgpr", """
	v_add_f32_e32 v5, v5, v9
	v_permlane32_swap_b32 v4, v5
""", """
	v_add_f32_e32 v5, v5, v9
	s_nop 1
	v_permlane32_swap_b32 v4, v5
"""),
    "m0-lds-dma": ("m0-lds-dma", """
	s_mov_b32 m0, s20
	buffer_load_dwordx4 v1, s[0:3], 0 offen lds
""", """
	s_mov_b32 m0, s20
	s_nop 0
	buffer_load_dwordx4 v1, s[0:3], 0 offen lds
"""),
    "vmem-sgpr/readfirstlane-rsrc": ("vmem-sgpr", """
	v_readfirstlane_b32 s8, v9
	s_nop 3
	buffer_store_dword v70, v5, s[8:11], 0 offen
""", """
	v_readfirstlane_b32 s8, v9
	s_nop 4
	buffer_store_dword v70, v5, s[8:11], 0 offen
"""),
    "vmem-sgpr/readlane-soffset": ("vmem-sgpr", """
	v_readlane_b32 s12, v9, 3
	s_waitcnt lgkmcnt(0)
	s_barrier
	buffer_load_dword v1, s[0:3], s12 offen lds
""", """
	v_readlane_b32 s12, v9, 3
	s_waitcnt lgkmcnt(0)
	s_barrier
	s_nop 2
	buffer_load_dword v1, s[0:3], s12 offen lds
"""),
    "vmem-sgpr/cmp-pair": ("vmem-sgpr", """
	v_cmp_gt_u32_e64 s[10:11], s0, v1
	buffer_store_dword v70, v5, s[8:11], 0 offen
""", """
	v_cmp_gt_u32_e64 s[10:11], s0, v1
	s_nop 4
	buffer_store_dword v70, v5, s[8:11], 0 offen
"""),
    "vmem-sgpr/readfirstlane-m0": ("vmem-sgpr", """
	v_readfirstlane_b32 m0, v9
	s_nop 0
	buffer_load_dword v1, s[0:3], 0 offen lds
""", """
	v_readfirstlane_b32 m0, v9
	s_nop 4
	buffer_load_dword v1, s[0:3], 0 offen lds
"""),
    "vmem-sgpr/cmpx-exec": ("vmem-sgpr", """
	v_cmpx_gt_u32_e64 s[2:3], s0, v1
	s_nop 3
	buffer_store_dword v70, v5, s[8:11], 0 offen
""", """
	v_cmpx_gt_u32_e64 s[20:21], s0, v1
	s_nop 4
	buffer_store_dword v70, v5, s[8:11], 0 offen
"""),
}

# The MFMA rule concerns inline asm only (the compiler pads its own consumers).
MFMA = "\tv_mfma_f32_32x32x64_f8f6f4 v[32:47], v[16:23], v[24:31], 0\n"
ASM_SWAP = "\t;;#ASMSTART\n\tv_permlane32_swap_b32 v40, v41\n\t;;#ASMEND\n"
CASES["mfma-asm"] = ("mfma-asm", MFMA + "\ts_nop 7\n\ts_nop 7\n\ts_nop 2\n" + ASM_SWAP,
                     MFMA + "\ts_nop 7\n\ts_nop 7\n\ts_nop 3\n" + ASM_SWAP)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_hazard_is_refused_and_enough_nops_accepted(case):
    rule, bad, good = CASES[case]
    found = refused(bad)
    assert [s.rule for s in found] == [rule], found
    assert refused(good) == [], refused(good)


def test_mfma_result_read_by_the_compiler_is_left_to_it():
    assert refused(MFMA + "\tv_permlane32_swap_b32 v50, v51\n" + "\tv_add_f32_e32 v40, v40, v41\n") == []


def test_unrelated_registers_are_no_hazard():
    snippet = """
	v_readfirstlane_b32 s30, v9
	v_add_f32_e32 v6, v6, v9
	s_mov_b32 m1, s20
	buffer_store_dword v70, v5, s[8:11], 0 offen
	v_permlane32_swap_b32 v4, v5
"""
    assert refused(snippet) == []


def test_kernel_entry_has_no_predecessor():
    assert refused("\tv_permlane32_swap_b32 v4, v5\n\tbuffer_load_dword v1, s[0:3], 0 offen lds\n") == []


def test_nop_counts():
    assert hazards.wait_states("s_nop", "0") == 1
    assert hazards.wait_states("s_nop", "7") == 8
    assert hazards.wait_states("s_nop", "0x3") == 4
    assert hazards.wait_states("s_waitcnt", "vmcnt(0)") == 1
    assert hazards.wait_states("#marker", "") == 0


@pytest.mark.parametrize(
    "line,expect",
    [
        ("v_mfma_scale_f32_32x32x64_f8f6f4 v[0:15], v[16:23], v[24:31], v[0:15], v32, v33", "scaled MFMA"),
        ("v_mfma_f32_32x32x64_f8f6f4 v[0:15], v[16:23], v[24:31], v[0:15] abid:1", "abid:1"),
        ("v_mfma_f32_32x32x64_f8f6f4 v[0:15], v[16:23], v[24:31], v[0:15] cbsz:1", "cbsz:1"),
        ("v_mfma_f32_32x32x64_f8f6f4 v[0:15], v[16:23], v[24:31], v[0:15] blgp:2", "blgp:2"),
        ("buffer_load_dword v1, s[0:3], 0 offen offset:4096 lds", "12-bit MUBUF offset"),
        ("buffer_store_dword v1, v2, s[0:3], 0 offen offset:5000", "12-bit MUBUF offset"),
        ("ds_read_b128 v[0:3], v4 offset:65536", "DS offset"),
        ("ds_read2_b32 v[0:1], v4 offset0:1 offset1:256", "DS offset"),
    ],
    ids=["mfma_scale", "abid", "cbsz", "blgp", "dma_4096", "store_5000", "ds_16bit", "ds_8bit"],
)
def test_each_refused_form(line, expect):
    op, args = line.split(None, 1)
    fails = hazards.form_failures(op, args)
    assert any(expect in f for f in fails), fails


@pytest.mark.parametrize(
    "line",
    ["v_mfma_f32_32x32x64_f8f6f4 v[0:15], v[16:23], v[24:31], v[0:15]",
     "v_mfma_f32_32x32x64_f8f6f4 v[0:15], v[16:23], v[24:31], v[0:15] cbsz:0 abid:0 blgp:0",
     "buffer_load_dword v1, s[0:3], 0 offen offset:4095 lds",
     "ds_read_b128 v[0:3], v4 offset:65535",
     "ds_read2_b32 v[0:1], v4 offset0:1 offset1:255"],
)
def test_accepted_forms(line):
    op, args = line.split(None, 1)
    assert hazards.form_failures(op, args) == []


needs_llvm = pytest.mark.skipif(shutil.which("llvm-mc-22") is None or shutil.which("llvm-objdump-22") is None,
                                reason="needs llvm-mc-22 and llvm-objdump-22 (Debian package llvm-22)")


@needs_llvm
def test_offset_4096_is_refused_after_encoding():
    """llvm-mc-22 takes offset:4096 without a word and encodes 0 (the bit lands in OFFEN's place),
    and 5000 as 904: the round trip through the object sees both."""
    functions = {"k": [("buffer_load_dword", "v1, s[0:3], 0 offen offset:1024 lds"),
                       ("buffer_load_dword", "v1, s[0:3], 0 offen offset:4096 lds"),
                       ("buffer_store_dword", "v1, v2, s[0:3], 0 offen offset:5000"),
                       ("s_endpgm", "")]}
    fails = hazards.encoded_offset_mismatches(functions)
    assert len(fails) == 2, fails
    assert "4096" in fails[0] and "none" in fails[0], fails
    assert "5000" in fails[1] and "904" in fails[1], fails


@needs_llvm
def test_offsets_that_fit_survive_encoding():
    functions = {"k": [(".LBB0_1:", ""),
                       ("buffer_load_dwordx4", "v1, s[0:3], 0 offen lds"),
                       ("buffer_load_dwordx4", "v2, s[0:3], 0 offen offset:1024 lds"),
                       ("buffer_load_dword", "v3, s[4:7], 0 offen offset:2048 lds"),
                       ("ds_read_b128", "v[4:7], v8 offset:4096"),
                       ("s_cbranch_scc1", ".LBB0_1"),
                       ("s_endpgm", "")],
                 "k2": [(".LBB0_1:", ""), ("buffer_store_dword", "v1, v2, s[0:3], 0 offen offset:4095"),
                        ("s_cbranch_scc1", ".LBB0_1"), ("s_endpgm", "")]}
    assert hazards.encoded_offset_mismatches(functions) == []


@needs_llvm
def test_planted_offset_fails_the_kernel_check():
    """The whole check (check_text's range rule and encoding_failures' round trip) on the
    synthetic kernels, one of whose DMAs is planted at offset 4096."""
    body = base.LOOP_BODY.replace("offset:1024 lds", "offset:4096 lds")
    text = base.assemble(**{base.H32: dict(body=body)})
    fails, _ = isa.check_text(text)
    assert any("12-bit MUBUF offset" in f for f in fails), fails
    enc = isa.encoding_failures(text)
    assert len(enc) == 1 and base.H32 in enc[0] and "4096" in enc[0], enc
    assert isa.encoding_failures(base.assemble()) == []


@pytest.mark.parametrize(
    "change,rule",
    [
        (lambda b: b.replace("\ts_barrier\n", "\ts_barrier\n\ts_mov_b32 m0, s40\n"), "m0-lds-dma"),
        (lambda b: b.replace("\tv_add_f32 v70, v70, v74\n", "\tv_cmpx_gt_u32_e32 vcc, s0, v1\n"), "permlane-exec"),
        (lambda b: b.replace("\tbuffer_store_dword v70, v5, s[8:11]",
                             "\tv_readfirstlane_b32 s9, v60\n\tbuffer_store_dword v70, v5, s[8:11]"), "vmem-sgpr"),
        (lambda b: b.replace("v_mfma_f32_32x32x64_f8f6f4 v[32:47], v[16:23], v[24:31], 0",
                             "v_mfma_f32_32x32x64_f8f6f4 v[32:47], v[16:23], v[24:31], 0 abid:1"), "abid:1"),
    ],
    ids=["m0", "exec", "sgpr", "abid"],
)
def test_kernel_check_refuses_planted_hazards(change, rule):
    fails = base.failures(**{base.H32: dict(body=change(base.LOOP_BODY))})
    assert any(rule in f for f in fails), fails


def test_summary_lines_and_diff():
    blocks = isa.parse_blocks(CASES["m0-lds-dma"][2].splitlines())
    lines = hazards.summary_lines("k", hazards.hazard_sites(blocks))
    assert len(lines) == 2 * len(hazards.RULES)
    assert "k m0-lds-dma compiler: sites 1, with a producer within 24 1, nearest 1 (needs >= 1)" in lines
    other = [line.replace("nearest 1 (", "nearest 3 (") for line in lines]
    diff = isa.diff_summaries(lines, other)
    assert diff == [f"- {lines[5]}", f"+ {other[5]}"], diff
    assert isa.diff_summaries(lines, lines) == []


def test_cli_options(tmp_path, capsys):
    assert check_cli.main(["--arch", "sm_90a", "--asm-out", str(tmp_path / "x"), "--cxx", "amdclang++"]) == 2
    assert "gfx950 only" in capsys.readouterr().err
    missing = str(tmp_path / "no-such-amdclang++")
    assert check_cli.main(["--arch", "gfx950", "--asm-out", str(tmp_path / "x.s"), "--cxx", missing]) == 2
    assert "no such compiler" in capsys.readouterr().err
    isa.CXX = None


def test_register_tokens():
    assert hazards.vgprs("v[32:35], v7, s[0:3], vcc offen offset:16") == {"v32", "v33", "v34", "v35", "v7"}
    assert hazards.sgprs("v[2:3], s[4:5], s12, vcc, m0, exec offen lds") == {
        "s4", "s5", "s12", "vcc_lo", "vcc_hi", "m0", "exec_lo", "exec_hi"}
