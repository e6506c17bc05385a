"""core/provenance.cpu_kind: the CPU kind a report names, read from Linux's cpuinfo."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from mrbench.core.provenance import cpu_kind

INTEL = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse sse2 avx avx2 fma avx512f avx512bw amx_tile

processor\t: 1
vendor_id\t: GenuineIntel
flags\t\t: fpu sse sse2
"""
AMD = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma\n"
ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes crc32\nCPU implementer\t: 0x41\n"
OLD = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse sse2 sse4_2\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (INTEL, "GenuineIntel AVX-512"),  # the first processor's flags, the widest named
        (AMD, "AuthenticAMD AVX2"),
        (ARM, "NEON"),  # Arm names its flags "Features" and has no vendor_id
        (OLD, "GenuineIntel"),  # no vector extension we name
    ],
)
def test_cpu_kind_names_the_architecture_vendor_and_widest_vector_instructions(
    tmp_path: Path, text: str, expected: str
) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(text)
    assert cpu_kind(cpuinfo) == f"{platform.machine()} {expected}"


def test_cpu_kind_without_cpuinfo_is_the_architecture(tmp_path: Path) -> None:
    assert cpu_kind(tmp_path / "missing") == platform.machine()
