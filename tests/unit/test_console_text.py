"""The guest console's text (scripts/vm/pvgpuvm.py: console_text,
ConsoleFilter): what a QEMU serial console really carries — SeaBIOS's
terminal reset and clear, auto-wrap switched off, CR LF line ends, a title
set by OSC, colours — comes out as plain lines, whole or cut anywhere
between two reads."""
from vm_script import vm


# The start of a real console (QEMU 7.2, SeaBIOS 1.16), then a guest that
# sets a title, prints in colour, overwrites a line with CR and resets the
# terminal again before its last line.
RAW = (b"\x1bc\x1b[?7l\x1b[2J\x1b[0mSeaBIOS (version 1.16.2-debian-1.16.2-1)\r\n"
       b"\x1bc\x1b[?7l\x1b[2J\x1b[0mBooting from ROM...\r\n"
       b"\x1b]0;guest title\x07\x1b]2;other title\x1b\\pvgpu-guest: running\r\n"
       b"\x1b[1;31mred\x1b[0m and \x1b[38;5;208mamber\x1b[m\ttabbed\r\n"
       b"50%\r100%\r\n"
       b"caf\xc3\xa9 \xe2\x94\x80\x07\x08\x7f done\r\n"
       b"\x1b7\x1b(B\x1b=\x1b8\x1bcpvgpu-guest: exit 0\r\n")
TEXT = ("SeaBIOS (version 1.16.2-debian-1.16.2-1)\n"
        "Booting from ROM...\n"
        "pvgpu-guest: running\n"
        "red and amber\ttabbed\n"
        "50%100%\n"
        "caf\u00e9 \u2500 done\n"
        "pvgpu-guest: exit 0\n")


def assert_plain(text):
    bad = [c for c in text if (ord(c) < 0x20 and c not in "\n\t")
           or 0x7f <= ord(c) <= 0x9f]
    assert not bad, bad


def test_console_text_strips_escapes_and_controls():
    got = vm.console_text(RAW.decode())
    assert got == TEXT
    assert_plain(got)


def test_each_sequence_alone():
    for seq in ["\x1bc", "\x1b[2J", "\x1b[?7l", "\x1b[?7h", "\x1b[H", "\x1b[0m",
                "\x1b]0;title\x07", "\x1b]8;;http://x\x1b\\", "\x1bP1$r\x1b\\",
                "\x1b(B", "\x1b7", "\r", "\x9b2J"]:
        assert vm.console_text(f"a{seq}b") == "ab", repr(seq)


def test_unfinished_sequence_loses_its_escape():
    assert vm.console_text("text\x1b[12") == "text[12"
    assert_plain(vm.console_text("text\x1b]0;never ends"))


def test_filter_gives_the_same_text_however_the_output_is_cut():
    for n in range(1, len(RAW) + 1):
        f = vm.ConsoleFilter()
        out = "".join(f.feed(RAW[i:i + n]) for i in range(0, len(RAW), n))
        out += f.feed(b"", final=True)
        assert out == TEXT, n


def test_filter_holds_only_a_cut_sequence():
    f = vm.ConsoleFilter()
    assert f.feed(b"line\r\n\x1b[?7") == "line\n"
    assert f.feed(b"lnext\r\n") == "next\n"
    # An OSC that never ends is released once it is longer than anything
    # the filter holds, less its ESC.
    f = vm.ConsoleFilter()
    first = f.feed(b"\x1b]0;" + b"x" * (vm.ConsoleFilter.HOLD_MAX + 10))
    assert first.startswith("]0;xxx"), first[:10]
