# SPDX-License-Identifier: Apache-2.0
"""Starting a rank on another host: the ssh (or replacement) command line and the remote script.

The remote side runs a small POSIX sh script (no Python needed there):
  - cd to the launcher's directory, export the rank's environment;
  - start the rank in its own session (setsid) so its whole process tree is one group, in the
    foreground (see remote_script);
  - a watcher subshell reads the ssh channel's stdin: kolorun writes a signal name (INT, TERM,
    HUP) and closes it to stop the rank, and a vanished kolorun or ssh client closes it too.
    Either way the watcher signals the rank's group, waits up to the grace period for the group
    to empty, then sends SIGKILL. So killing kolorun -9 still leaves no remote orphans;
  - when the rank exits, what is left of its group gets SIGTERM, then SIGKILL after the grace
    period;
  - the script exits with the rank's status (128+N when it died on signal N), which ssh
    passes back to kolorun. The script's own shell messages ("Terminated") go to /dev/null;
    the rank's stderr is the channel's.
Process groups count as empty once only zombies are left in them (an orphaned zombie stays
until init reaps it, which some container inits do late).
"""

import shlex

from .hosts import cwd_for_remote

# Variables that describe the launcher's own login session rather than the job; every other
# variable of kolorun's environment is passed to remote ranks (as horovodrun does).
_SESSION_VARS = {
    "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "SHLVL", "_", "TERM", "HOSTNAME",
    "DISPLAY", "MAIL", "PS1", "PS2", "PS4", "LS_COLORS", "XAUTHORITY", "TMPDIR", "COLUMNS",
    "LINES", "PROMPT_COMMAND", "HISTFILE", "MOTD_SHOWN", "TERMCAP", "WINDOWID", "COLORTERM",
}
_SESSION_PREFIXES = ("SSH_", "XDG_", "BASH_FUNC_", "TMUX", "KITTY_", "VTE_", "DBUS_")

SSH_BASE_OPTIONS = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                    "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]


def _valid_name(name):
    return (name and (name[0].isalpha() or name[0] == "_")
            and all(c.isalnum() or c == "_" for c in name) and name.isascii())


def remote_environment(environ, rank_env, forced_names=()):
    """What a remote rank gets: kolorun's environment minus session variables, then rank_env.
    forced_names (the -x variables) are kept even when they look like session variables."""
    env = {}
    for name, value in environ.items():
        if not _valid_name(name) or "\0" in value:
            continue
        if name in forced_names or not (name in _SESSION_VARS
                                        or name.startswith(_SESSION_PREFIXES)):
            env[name] = value
    env.update(rank_env)
    return env


def remote_script(env, command, grace_seconds, cwd=None):
    """The sh script that runs `command` (a list) on the remote host; see the module doc.

    The rank runs in the foreground: a non-interactive shell starts background commands with
    SIGINT ignored, and the rank must be able to receive the SIGINT kolorun forwards. It tells
    the watcher its pid through a temporary file, then becomes a session leader (setsid runs
    in place because a foreground child does not lead its process group)."""
    cwd = cwd_for_remote() if cwd is None else cwd
    ticks = max(1, int(round(grace_seconds * 10)))
    exports = "".join("export %s=%s\n" % (k, shlex.quote(v)) for k, v in sorted(env.items()))
    cmd = " ".join(shlex.quote(c) for c in command)
    return (
        "cd %(cwd)s >/dev/null 2>&1\n"
        "%(exports)s"
        "kolo_alive() {\n"  # does process group $1 have a member that is not a zombie?
        "  kill -s 0 -- -\"$1\" 2>/dev/null || return 1\n"
        "  [ -r /proc/self/stat ] || return 0\n"
        "  for kolo_d in /proc/[0-9]*; do\n"
        "    read -r kolo_l < \"$kolo_d/stat\" 2>/dev/null || continue\n"
        "    set -- \"$1\" ${kolo_l##*\") \"}\n"
        "    [ \"$4\" = \"$1\" ] && [ \"$2\" != Z ] && return 0\n"
        "  done\n"
        "  return 1\n"
        "}\n"
        "kolo_pidf=$(mktemp 2>/dev/null) || kolo_pidf=/tmp/kolo-rank.$$\n"
        "exec 3<&0 4>&2 2>/dev/null\n"
        "( kolo_sig=\n"
        "  read -r kolo_sig <&3\n"
        "  case \"$kolo_sig\" in INT|TERM|HUP|KILL) ;; *) kolo_sig=TERM ;; esac\n"
        "  kolo_n=0\n"
        "  while [ ! -s \"$kolo_pidf\" ] && [ \"$kolo_n\" -lt %(ticks)d ]; do\n"
        "    sleep 0.1; kolo_n=$((kolo_n + 1))\n"
        "  done\n"
        "  kolo_pid=$(cat \"$kolo_pidf\" 2>/dev/null)\n"
        "  [ -n \"$kolo_pid\" ] || exit 0\n"
        "  if kill -s \"$kolo_sig\" -- -\"$kolo_pid\" 2>/dev/null; then\n"
        "    while kolo_alive \"$kolo_pid\" && [ \"$kolo_n\" -lt %(ticks)d ]; do\n"
        "      sleep 0.1; kolo_n=$((kolo_n + 1))\n"
        "    done\n"
        "    ! kolo_alive \"$kolo_pid\" || kill -s KILL -- -\"$kolo_pid\" 2>/dev/null\n"
        "  elif kill -s \"$kolo_sig\" \"$kolo_pid\" 2>/dev/null; then\n"  # no setsid there
        "    while kill -s 0 \"$kolo_pid\" 2>/dev/null && [ \"$kolo_n\" -lt %(ticks)d ]; do\n"
        "      sleep 0.1; kolo_n=$((kolo_n + 1))\n"
        "    done\n"
        "    kill -s KILL \"$kolo_pid\" 2>/dev/null\n"
        "  fi\n"
        ") 3<&3 4>&- &\n"
        "kolo_watch=$!\n"
        "exec 3<&-\n"
        "( exec </dev/null 2>&4 4>&-\n"
        "  exec sh -c 'echo $$ >\"$0\"; if command -v setsid >/dev/null 2>&1; then"
        " exec setsid \"$@\"; else exec \"$@\"; fi' \"$kolo_pidf\" %(cmd)s )\n"
        "kolo_rc=$?\n"
        "kolo_pid=$(cat \"$kolo_pidf\" 2>/dev/null)\n"
        "if [ -n \"$kolo_pid\" ] && kill -s TERM -- -\"$kolo_pid\" 2>/dev/null; then\n"
        "  kolo_n=0\n"
        "  while kolo_alive \"$kolo_pid\" && [ \"$kolo_n\" -lt %(ticks)d ]; do\n"
        "    sleep 0.1; kolo_n=$((kolo_n + 1))\n"
        "  done\n"
        "  kill -s KILL -- -\"$kolo_pid\" 2>/dev/null\n"
        "fi\n"
        "kill \"$kolo_watch\" 2>/dev/null\n"
        "rm -f \"$kolo_pidf\"\n"
        "exit \"$kolo_rc\"\n"
    ) % {"cwd": shlex.quote(cwd), "exports": exports, "cmd": cmd, "ticks": ticks}


def remote_shell_prefix(host, port=None, identity=None, template=None, extra_options=""):
    """The argv that runs a shell command string on `host`: ssh by default, or the
    KOLO_LAUNCHER_REMOTE_SHELL template with {host} and {port} filled in."""
    if template:
        return [t.replace("{host}", host).replace("{port}", str(port or ""))
                for t in shlex.split(template)]
    argv = ["ssh"] + SSH_BASE_OPTIONS
    if port:
        argv += ["-p", str(port)]
    if identity:
        argv += ["-o", "IdentitiesOnly=yes", "-i", identity]
    argv += shlex.split(extra_options or "")
    return argv + [host]


def remote_argv(host, env, command, grace_seconds, port=None, identity=None, template=None,
                extra_options="", cwd=None):
    """The full local argv that starts one remote rank; its stdin is the watcher channel."""
    script = remote_script(env, command, grace_seconds, cwd)
    prefix = remote_shell_prefix(host, port, identity, template, extra_options)
    return prefix + ["sh -c " + shlex.quote(script)]


def describe(argv, command, nvars):
    """A readable one-liner of remote_argv's result for --verbose."""
    return "%s 'sh -c <watcher: %s, %d variables exported>'" % (
        " ".join(shlex.quote(a) for a in argv[:-1]), " ".join(shlex.quote(c) for c in command),
        nvars)
