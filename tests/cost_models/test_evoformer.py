"""The AlphaFold-2 Evoformer block against OpenFold's module list and a second FLOP derivation."""

import pytest

from cost_models.compute import gemm_flops
from cost_models.enums import Recompute
from cost_models.evoformer import (EvoformerShape, evoformer_block_activation_bytes,
                                   evoformer_block_gemms, evoformer_block_params)

AF2 = EvoformerShape(msa_dim=256, pair_dim=128, num_msa_heads=8, num_pair_heads=4, head_dim=32,
                     outer_dim=32, tri_mul_dim=128, transition_factor=4, num_msa_rows=128)


def test_block_parameters_match_openfold_modules():
    # OpenFold (aqlaboratory/openfold, model/*.py), every Linear and LayerNorm of one block:
    msa_row = 512 + 256 + 1024 + 3 * 65_536 + 2 * 65_792          # LN_m, LN_z, pair bias, QKV, gate, out
    msa_col = 512 + 196_608 + 131_584
    msa_transition = 512 + 263_168 + 262_400
    outer_product_mean = 512 + 2 * 8_224 + 131_200
    tri_mul = 256 + 4 * 16_512 + 2 * 16_512 + 256                  # each of the two
    tri_att = 256 + 512 + 3 * 16_384 + 2 * 16_512                  # each of the two
    pair_transition = 256 + 66_048 + 65_664
    expected = (msa_row + msa_col + msa_transition + outer_product_mean + 2 * tri_mul
                + 2 * tri_att + pair_transition)
    assert expected == 1_829_952
    assert evoformer_block_params(AF2).total == expected


@pytest.mark.parametrize(("S", "R"), [(128, 256), (512, 384)])
def test_block_flops_match_the_module_formulas(S, R):
    cm, cz, Hm, Hz, d, c, c2, n = 256, 128, 8, 4, 32, 32, 128, 4
    closed = (10 * S * R * cm**2 + 4 * S * R**2 * Hm * d + 2 * R**2 * cz * Hm      # MSA row attention
              + 10 * S * R * cm**2 + 4 * R * S**2 * Hm * d                       # MSA column attention
              + 4 * n * S * R * cm**2                                             # MSA transition
              + 4 * S * R * cm * c + 2 * S * R**2 * c**2 + 2 * R**2 * c**2 * cz   # outer product mean
              + 2 * (10 * R**2 * cz * c2 + 2 * R**2 * cz**2 + 2 * R**3 * c2)     # triangle mult. x2
              + 2 * (10 * R**2 * cz**2 + 4 * R**3 * Hz * d + 2 * R**2 * cz * Hz)  # triangle attn. x2
              + 4 * n * R**2 * cz**2)                                             # pair transition
    shape = AF2._replace(num_msa_rows=S)
    got = sum(gemm_flops(g) for g in evoformer_block_gemms(shape, num_residues=R, micro_batch=1, tp=1))
    assert got == pytest.approx(closed, rel=1e-12)


def test_tensor_parallelism_splits_the_flops():
    one = sum(gemm_flops(g) for g in evoformer_block_gemms(AF2, num_residues=256, micro_batch=1, tp=1))
    four = sum(gemm_flops(g) for g in evoformer_block_gemms(AF2, num_residues=256, micro_batch=1, tp=4))
    assert four == pytest.approx(one / 4)


def test_activations_order_and_full_recompute():
    kw = dict(num_residues=256, micro_batch=1, tp=1, sequence_parallel=False, flash=False)
    none = evoformer_block_activation_bytes(AF2, recompute=Recompute.NONE, **kw)
    selective = evoformer_block_activation_bytes(AF2, recompute=Recompute.SELECTIVE, **kw)
    full = evoformer_block_activation_bytes(AF2, recompute=Recompute.FULL, **kw)
    assert full < selective < none
    # Full recompute keeps the block input: the MSA and pair representations in 16 bits.
    assert full == 2 * (128 * 256 * 256 + 256 * 256 * 128)
