"""The gfx950 ISA checker (dev/isa/gfx950.py) on synthetic assembly: a well-formed stage
loop passes, and every rule fails when its condition is injected. (CI runs the checker on the real
kernel: python -m dev.isa.check --arch gfx950.)"""

from __future__ import annotations

import pytest

from dev.isa import gfx950 as isa

LOOP_BODY = """\
	;;#ASMSTART
	s_waitcnt vmcnt(14) lgkmcnt(0)
	s_barrier
	buffer_load_dwordx4 v1, s[0:3], 0 offen lds
	buffer_load_dword v2, s[4:7], 0 offen offset:1024 lds
	; gfx950-stage-vmem 4 depth 4
	;;#ASMEND
	ds_read_b128 v[24:27], v3
	ds_read_b128 v[28:31], v4
	s_waitcnt lgkmcnt(0)
	v_mfma_f32_32x32x64_f8f6f4 v[32:47], v[16:23], v[24:31], 0
	v_max_f32_e32 v50, 0, v60
	v_fmac_f32_e32 v51, v50, v61
	;;#ASMSTART
	v_add_f32 v70, v70, v74
	v_add_f32 v71, v71, v75
	v_add_f32 v72, v72, v76
	v_add_f32 v73, v73, v77
	v_permlane32_swap_b32 v70, v71
	v_mul_f32 v70, v70, v78
	v_permlane32_swap_b32 v72, v73
	;;#ASMEND
	buffer_store_dword v70, v5, s[8:11], 0 offen
	buffer_store_dword v70, v6, s[12:15], 0 offen
"""


def kernel(name, idx, body=LOOP_BODY, meta=None, prologue=""):
    m = dict(agpr_count=0, group_segment_fixed_size=92000, private_segment_fixed_size=0,
             sgpr_count=90, sgpr_spill_count=0, vgpr_count=200, vgpr_spill_count=0)
    m.update(meta or {})
    text = f"""\
	.text
{name}:                 ; @{name}
; %bb.0:
	s_mov_b32 s20, 0
{prologue}.LBB{idx}_1:
{body}	s_add_i32 s20, s20, 1
	s_cmp_lt_i32 s20, s21
	s_cbranch_scc1 .LBB{idx}_1
; %bb.2:
	s_endpgm
.Lfunc_end{idx}:
	.set {name}.num_vgpr, {m['vgpr_count']}
	.set {name}.num_agpr, {m['agpr_count']}
"""
    meta_text = f"  - .agpr_count:     {m['agpr_count']}\n"
    meta_text += "".join(f"    .{k}: {v}\n" for k, v in m.items() if k != "agpr_count")
    meta_text += f"    .name:           {name}\n"
    return text, meta_text


def assemble(**overrides):
    """Four kernels; `overrides` maps a kernel name to kernel() keyword arguments."""
    texts, metas = [], []
    for i, name in enumerate(isa.KERNELS):
        t, mt = kernel(name, i, **overrides.get(name, {}))
        texts.append(t)
        metas.append(mt)
    return "".join(texts) + "\t.amdgpu_metadata\n---\namdhsa.kernels:\n" + "".join(metas) + "\t.end_amdgpu_metadata\n"


def failures(**overrides):
    fails, _ = isa.check_text(assemble(**overrides))
    return fails


H32 = isa.KERNELS[0]


def test_clean_template_passes():
    fails, lines = isa.check_text(assemble())
    assert fails == [], fails
    assert any("stage loop" in line for line in lines)


@pytest.mark.parametrize(
    "change,expect",
    [
        (lambda b: b.replace("\tv_max_f32_e32", "\ts_nop 3\n\tv_max_f32_e32"), "s_nop"),
        (lambda b: b.replace("v_permlane32_swap_b32", "v_mov_b32"), "no v_permlane32_swap_b32"),
        (lambda b: b.replace("v_fmac_f32_e32 v51", "v_pk_fma_f32 v[52:53]"), "packed fp32"),
        (lambda b: b.replace("\ts_waitcnt lgkmcnt(0)\n\tv_mfma", "\ts_waitcnt vmcnt(0)\n\tv_mfma"), "compiler-placed vmcnt"),
        (lambda b: b + "\tbuffer_store_dword v70, v7, s[16:19], 0 offen\n", "VMEM ops"),
        (lambda b: b.replace("vmcnt(14)", "vmcnt(15)"), "hand-placed vmcnt"),
        (lambda b: b.replace("\tv_mul_f32 v70, v70, v78\n", ""), "permlane hazard"),
        (lambda b: b.replace("v_writelane", "") + "\tv_writelane_b32 v90, s30, 0\n", "SGPR spill"),
    ],
    ids=["s_nop", "no_permlane", "packed", "compiler_vmcnt", "vmem_count", "wait_count", "permlane_hazard",
         "lane_spill"],
)
def test_each_loop_rule_fails(change, expect):
    fails = failures(**{H32: dict(body=change(LOOP_BODY))})
    assert any(expect in f for f in fails), fails


def test_loop_without_mfma_fails():
    fails = failures(**{H32: dict(body=LOOP_BODY.replace("v_mfma_f32_32x32x64_f8f6f4", "v_mfma_f32_32x32x16_bf16"))})
    assert any("no loop holding" in f for f in fails), fails


@pytest.mark.parametrize(
    "meta,expect",
    [
        (dict(vgpr_count=257), "VGPR+AGPR"),
        (dict(vgpr_count=200, agpr_count=64), "VGPR+AGPR"),
        (dict(group_segment_fixed_size=163841), "LDS"),
        (dict(private_segment_fixed_size=16), "scratch"),
        (dict(vgpr_spill_count=2), "scratch"),
    ],
    ids=["vgpr", "agpr", "lds", "private", "vgpr_spill"],
)
def test_each_budget_rule_fails(meta, expect):
    fails = failures(**{H32: dict(meta=meta)})
    assert any(expect in f for f in fails), fails


def test_missing_kernel_fails():
    text = assemble().replace(isa.KERNELS[3], "some_other_kernel")
    fails, _ = isa.check_text(text)
    assert any("missing" in f for f in fails), fails


def test_structurized_if_else_paths_are_pruned():
    """StructurizeCFG turns a uniform if/else into `if (A) X; if (!A) Y` chained through an SGPR
    flag; the path through both X and Y is infeasible and must not be counted."""
    half = LOOP_BODY.split("\tds_read_b128 v[24:27]")[0]
    rest = "\tds_read_b128 v[24:27]" + LOOP_BODY.split("\tds_read_b128 v[24:27]")[1]
    body = (
        half
        + "\ts_mov_b64 s[6:7], -1\n\ts_andn2_b64 vcc, exec, s[12:13]\n\ts_cbranch_vccz .LBB0_5\n"
        + rest
        + "\ts_mov_b64 s[6:7], 0\n.LBB0_5:\n\ts_andn2_b64 vcc, exec, s[6:7]\n\ts_cbranch_vccnz .LBB0_6\n"
        + rest
        + ".LBB0_6:\n"
    )
    fails, lines = isa.check_text(assemble(**{H32: dict(body=body)}))
    assert fails == [], fails
    assert any("2 paths" in line for line in lines), lines
