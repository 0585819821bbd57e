"""A traceback cut before its exception line says where the error was raised, not what it was: a
rule that knows the failure only by that stack (a cut argument check, a cut import) yields to an
error the same text names in a rule's own wording (a report's title quoting the error line). Loose
family words in the text do not outrank the stack, and a traceback that kept its error line keeps
its own reading."""

from phrasing_helpers import first_category, traceback_text

from ddtreed.paths import shipped
from ddtreed.rules import load_rules

RULES = load_rules([shipped("rules")])
ARGS = ["sglang/launch_server.py:<module>", "sglang/srt/server_args.py:prepare_server_args",
        "sglang/srt/server_args.py:from_cli_args"]
CUT = "    return cls(**{attr: getattr(args, attr) for attr in attrs})"


def test_a_named_library_error_outranks_a_cut_argument_check_stack():
    text = "libcudart.so.12: cannot open shared object file: No such file or directory\n\n" + traceback_text(ARGS, CUT)
    assert first_category(RULES, text)[0] == "missing-dependency"


def test_the_cut_stack_alone_keeps_its_reading():
    assert first_category(RULES, "The launch fails:\n\n" + traceback_text(ARGS, CUT))[0] == "unsupported-config"


def test_family_words_alone_do_not_outrank_the_cut_stack():
    text = "Launch fails since I upgraded ninja\n\n" + traceback_text(ARGS, CUT)
    assert first_category(RULES, text)[0] == "unsupported-config"


def test_a_traceback_with_its_error_line_keeps_its_reading():
    text = ("libcudart.so.12: cannot open shared object file: No such file or directory\n\n"
            + traceback_text(ARGS + ["sglang/srt/server_args.py:__post_init__"],
                             "ValueError: --tp-size 3 must divide the number of attention heads (32)"))
    assert first_category(RULES, text)[0] == "unsupported-config"
