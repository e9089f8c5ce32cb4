#!/bin/sh
# Installs and starts the sockferry LaunchAgents for the current user on macOS (doc/MACOS.md):
# sockferry.relay (the relay) and sockferry.logrotate (keeps its log below 1 MiB, three old
# copies: sockferry.logrotate.plist.in says how).
#
#   packaging/launchd/install.sh [--sockferry PATH]   install both in ~/Library/LaunchAgents, start them
#   packaging/launchd/install.sh --uninstall          stop them and remove the plists
#   packaging/launchd/install.sh --print [--sockferry PATH]   write the relay's filled plist to stdout only
#   packaging/launchd/install.sh --print-logrotate    write the log rotation's filled plist to stdout only
#
# launchd expands neither ~ nor $HOME and runs the program without a login PATH, so the
# template gets absolute paths here: the binary (default: sockferry on PATH) and $HOME.
set -eu

label=sockferry.relay
rotate_label=sockferry.logrotate
here=$(cd "$(dirname "$0")" && pwd)
usage() {
        echo "usage: $0 [--sockferry PATH] [--print | --print-logrotate | --uninstall]" >&2
        exit 64
}
sockferry=
mode=install
while [ $# -gt 0 ]; do
        case $1 in
        --sockferry) [ $# -ge 2 ] || usage; sockferry=$2; shift 2 ;;
        --print) mode=print; shift ;;
        --print-logrotate) mode=print-logrotate; shift ;;
        --uninstall) mode=uninstall; shift ;;
        *) usage ;;
        esac
done
case ${HOME:-} in
/*) ;;
*) echo "$0: HOME ('${HOME:-}') is not an absolute path" >&2; exit 1 ;;
esac

plist=$HOME/Library/LaunchAgents/$label.plist
rotate_plist=$HOME/Library/LaunchAgents/$rotate_label.plist
logdir=$HOME/Library/Logs/sockferry
conf=$HOME/.config/sockferry/sockferry.conf

if [ "$mode" = uninstall ]; then
        for l in "$label" "$rotate_label"; do
                launchctl bootout "gui/$(id -u)/$l" 2>/dev/null || true
        done
        rm -f "$plist" "$rotate_plist"
        echo "$label and $rotate_label stopped and removed; $conf and $logdir are left in place"
        exit 0
fi

# XML text, then a sed replacement: & < > become entities, then \ & | are escaped for sed.
fill_value() {
        printf '%s' "$1" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/[\\&|]/\\&/g'
}
fill_rotate() {
        sed -e "s|@HOME@|$(fill_value "$HOME")|g" "$here/sockferry.logrotate.plist.in"
}
if [ "$mode" = print-logrotate ]; then
        fill_rotate
        exit 0
fi
if [ -z "$sockferry" ]; then
        sockferry=$(command -v sockferry) || {
                echo "$0: sockferry is not on PATH: give --sockferry /path/to/sockferry" >&2; exit 1; }
fi
case $sockferry in
/*) ;;
*) echo "$0: --sockferry $sockferry: launchd needs an absolute path" >&2; exit 64 ;;
esac
case $sockferry$HOME in
*"
"*) echo "$0: a path holds a newline" >&2; exit 64 ;;
esac

fill() {
        sed -e "s|@SOCKFERRY@|$(fill_value "$sockferry")|g" -e "s|@HOME@|$(fill_value "$HOME")|g" \
                "$here/sockferry.relay.plist.in"
}

if [ "$mode" = print ]; then
        fill
        exit 0
fi

[ "$(uname -s)" = Darwin ] || { echo "$0: installs a LaunchAgent: macOS only (--print works anywhere)" >&2; exit 1; }
[ -x "$sockferry" ] || { echo "$0: $sockferry is not an executable file" >&2; exit 1; }
[ -f "$conf" ] || {
        echo "$0: $conf does not exist: write it first (doc/MACOS.md, \"Configuration\")" >&2; exit 1; }
mkdir -p "$HOME/Library/LaunchAgents" "$logdir"
fill >"$plist.new"
fill_rotate >"$rotate_plist.new"
plutil -lint -s "$plist.new"
plutil -lint -s "$rotate_plist.new"
mv "$plist.new" "$plist"
mv "$rotate_plist.new" "$rotate_plist"
# A loaded job keeps its old definition: unload it first (no error if it was not loaded).
for l in "$label" "$rotate_label"; do
        launchctl bootout "gui/$(id -u)/$l" 2>/dev/null || true
        launchctl bootstrap "gui/$(id -u)" "$HOME/Library/LaunchAgents/$l.plist"
done
echo "$label started: $sockferry relay -c $conf"
echo "log: $logdir/sockferry.log, rotated above 1 MiB by $rotate_label; state: launchctl print gui/$(id -u)/$label"
