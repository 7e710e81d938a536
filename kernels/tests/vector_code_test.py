"""The CPU kernels' hot loops, read from the machine code of each level.

The kernels issue's cause was code nobody looked at: the AVX2 clone of the
forward was full of scalar vmovss/vmaxss. This disassembles the built library
(objdump, from binutils, which gcc brings) and checks, in every level's
float32, bfloat16 and float64 forwards (plain and masked) and backwards, that each inner loop doing
packed float arithmetic works on whole registers of that level's width, with
no scalar float code and no splitting of vectors into halves (GCC's
vinserti128 when it lowers a conversion piece by piece).
"""

import re
import subprocess

import pytest

from kernels.library import find

WIDTH = {"avx512_bf16": "zmm", "avx512": "zmm", "avx2": "ymm", "baseline": "xmm"}
SCALAR = re.compile(r"^v?(add|sub|mul|div|max|min|mov|cvt\w*)s[sd]\b|^v?f(n)?m(add|sub)\d+s[sd]\b|"
                    r"^v?(u)?comis[sd]\b|^vinsertps\b|^v?extractps\b|^v?pinsrw\b|^v?pextrw\b|"
                    r"^vinserti(128|32x4|64x4)\b|^vextracti(128|32x4|64x4)\b")
PACKED = re.compile(r"^v?(f(n)?m(add|sub)\d+|mul|add|sub|max)p[sd]\b")
FUNCTIONS = [  # forward_rows<float> holds the softmax and log-softmax loops, inlined
    "forward_rows<float>", "forward_rows<warp_softmax::BFloat16>", "forward_rows<warp_softmax::Half>",
    "forward_masked<float>", "forward_masked<warp_softmax::BFloat16>",
    "backward_rows<false, false, float>", "backward_rows<true, true, float>",
    "backward_rows<false, false, warp_softmax::BFloat16>",
    "forward_rows_f64", "forward_masked_f64", "backward_rows<false, false, double>",
]


def disassembly():
    return subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", find("warp_softmax_numpy.so")],
                          check=True, capture_output=True, text=True).stdout


def functions(text):
    """{demangled name: [(address, mnemonic, operands)]}"""
    out, current = {}, None
    for line in text.splitlines():
        header = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if header:
            current = out.setdefault(header.group(1), [])
            continue
        insn = re.match(r"^\s+([0-9a-f]+):\t(\S+)\s*(.*)$", line)
        if insn and current is not None:
            current.append((int(insn.group(1), 16), insn.group(2), insn.group(3)))
    return out


def loops(code):
    """Bodies of the innermost loops: from a backward jump's target to the jump,
    holding no other backward jump, call or return (outer loops, laid out
    around their inner ones, hold those)."""
    address = {a: i for i, (a, _, _) in enumerate(code)}

    def backward(insn):
        a, mnemonic, operands = insn
        target = re.match(r"([0-9a-f]+) <", operands)
        return mnemonic.startswith("j") and target and int(target.group(1), 16) < a and \
            int(target.group(1), 16)

    bodies = []
    for i, insn in enumerate(code):
        target = backward(insn)
        start = address.get(target) if target else None
        if start is None:
            continue
        body = code[start:i + 1]
        if not any(backward(other) or other[1].startswith(("call", "ret")) for other in body[:-1]):
            bodies.append(body)
    return bodies


@pytest.fixture(scope="module")
def code():
    return functions(disassembly())


@pytest.mark.parametrize("level", sorted(WIDTH))
@pytest.mark.parametrize("function", FUNCTIONS)
def test_hot_loops_are_packed_at_the_levels_width(code, level, function):
    if level == "baseline" and "Half" in function:
        pytest.skip("baseline x86-64 has no F16C: float16 converts element by element there")
    name = next((n for n in code if "cpu::%s::" % level in n and "::%s(" % function in n), None)
    assert name, "no %s in the %s kernels" % (function, level)
    # Loops of packed arithmetic on full registers; element-by-element tail
    # copies (scalar by design) have none.
    hot = [body for body in loops(code[name])
           if any(PACKED.match(m) and "%" + WIDTH[level] in o for _, m, o in body)]
    assert hot, "%s: no packed loop found" % name
    for body in hot:
        listing = "\n".join("%x: %s %s" % insn for insn in body)
        # A constant read from the constant pool and broadcast (SSE2's two-operand maxpd
        # overwrites its register, so GCC rematerialises a splat there) is not element code.
        scalar = [m for _, m, o in body if SCALAR.match(m) and not (m.endswith(("movss", "movsd")) and "(%rip)" in o)]
        assert not scalar, "%s: scalar float code in a hot loop:\n%s" % (name, listing)
        registers = set(re.findall(r"%([xyz]mm)\d+", " ".join(o for _, _, o in body)))
        assert WIDTH[level] in registers, "%s: no %s register in a hot loop:\n%s" % (name, WIDTH[level], listing)
        wider = {"xmm": {"ymm", "zmm"}, "ymm": {"zmm"}, "zmm": set()}[WIDTH[level]]
        assert not registers & wider, "%s uses wider registers than its level" % name
