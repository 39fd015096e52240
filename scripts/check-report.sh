#!/usr/bin/env bash
# Opens a `gpuswap report` page in headless Chromium (Debian's package: apt-get install
# chromium) with every network address unresolvable, and fails unless the page loads
# with no console errors, shows every figure it embeds (as data: images, never inline
# markup), and renders a screenshot.
#   scripts/check-report.sh results/index.html [screenshot.png]
# Without an argument it makes a small sweep and its page first (about 20 s).
set -euo pipefail
# A page named relative to where the script was called from.
page=${1:+$(realpath "$1")}
shot=${2:+$(realpath -m "$2")}
cd "$(dirname "$0")/.."

browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
    echo "check-report: no chromium on this machine (apt-get install chromium)" >&2
    exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
shot=${shot:-$work/page.png}
if [ -z "$page" ]; then
    cargo run --quiet --release -- sweep scenarios/quickstart.toml \
        --vary device.vram_limit=250MiB,350MiB --runs 1 --quiet --out "$work/sweep"
    page=$work/index.html
    cargo run --quiet --release -- report "$work/sweep" --html "$page"
fi
url="file://$(realpath "$page")"
# No network: a page that fetched anything would log a failed load.
flags=(--headless --no-sandbox --disable-gpu --user-data-dir="$work/profile"
    --host-resolver-rules="MAP * ~NOTFOUND" --enable-logging=stderr --v=0
    --window-size=1280,2400)

"$browser" "${flags[@]}" --dump-dom "$url" > "$work/dom.html" 2> "$work/console.log"
"$browser" "${flags[@]}" --screenshot="$shot" "$url" > /dev/null 2>> "$work/console.log"

status=0
if grep -E 'CONSOLE.*(Uncaught|[Ee]rror)|Failed to load resource' "$work/console.log"; then
    echo "check-report: the page logged errors (above)" >&2
    status=1
fi
embedded=$(grep -o '<img [^>]*src="data:image/svg+xml;base64,' "$page" | wc -l)
rendered=$(grep -o '<img [^>]*src="data:image/svg+xml;base64,' "$work/dom.html" | wc -l)
if [ "$embedded" -eq 0 ] || [ "$rendered" -ne "$embedded" ]; then
    echo "check-report: $embedded figures in the page, $rendered in the rendered DOM" >&2
    status=1
fi
# A figure inlined as markup could carry a script from the sweep's folder.
if grep -q '<svg' "$page"; then
    echo "check-report: the page inlines SVG markup; figures must be images" >&2
    status=1
fi
if [ ! -s "$shot" ]; then
    echo "check-report: no screenshot" >&2
    status=1
fi
[ "$status" -eq 0 ] && echo "check-report: $page loads with no console errors; $rendered figures shown; screenshot $shot"
exit "$status"
