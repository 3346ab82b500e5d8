# SPDX-License-Identifier: Apache-2.0
"""pytest hooks of the fault tests: print the figures the tests collected (faultlib)."""

import faultlib


def pytest_terminal_summary(terminalreporter):
    for line in faultlib.summary_lines():
        terminalreporter.write_line(line)
