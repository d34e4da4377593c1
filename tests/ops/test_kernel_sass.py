"""Reading SASS (scripts/kernel_model/sass.py): the registers each operand names at its width, what
an instruction reads and writes, the filler that never executes, and where a loop runs."""

from __future__ import annotations

from scripts.kernel_model import sass


def test_registers_reads_wide_operands():
    assert sass.registers(" R24, desc[UR6][R24.64]", 16) == {"R24", "R25", "R26", "R27"}
    assert sass.registers(" RZ, RZ, R24, UR4, PT") == {"R24"}
    assert sass.registers(" desc[UR4][R2.64], R8", 16) == {"R2", "R3", "R8", "R9", "R10", "R11"}


def test_reads_and_writes_follow_each_operand_s_role():
    rw = sass.reads_and_writes
    assert rw("LDS", ".128", " R36, [R7+0x200]") == ({"R7"}, {"R36", "R37", "R38", "R39"})
    assert rw("STG", ".E.128", " desc[UR6][R40.64], R32") == ({"R40", "R41", "R32", "R33", "R34", "R35"}, set())
    assert rw("ISETP", ".GE.AND", " P1, PT, R62, R11, PT") == ({"R62", "R11"}, {"P1"})
    assert rw("IADD3", "", " R0, P5, P6, R36, R2, R59") == ({"R36", "R2", "R59"}, {"R0", "P5", "P6"})
    assert rw("DFMA", "", " R4, R6, 2, R4") == ({"R4", "R5", "R6", "R7"}, {"R4", "R5"})
    assert rw("SHFL", ".UP", " PT, R37, R39, 0x1, RZ") == ({"R39"}, {"R37"})
    assert sass.parse("@!P5 FADD R40, R51, R114").reads == {"P5", "R51", "R114"}


def test_instructions_predicated_on_not_pt_are_no_instructions():
    assert sass.parse("@!PT LDS RZ, [RZ]") is None


def test_a_loop_runs_from_its_latch_s_target_to_the_latch():
    function = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   FADD R2, R2, R3 ;
        /*0020*/              @!P0 BRA 0x10 ;
        /*0030*/                   BRA 0x0 ;
        /*0040*/                   EXIT ;
    """
    # the unconditional branch back returns from a fallback path into the loop: no loop of its own
    assert sass.loops(function) == [["FADD R2, R2, R3", "@!P0 BRA 0x10"]]
