# Issue 14 part 5: `tracecache report -o FILE` writes one self-contained HTML page a person reads.
# A cache with a program whose batch size varies (misses explained by the dim that differs), a
# once-mode run with a recompile, a corrupt executable and hostile text planted in the audit log;
# the page is well-formed (html.parser), has no network reference and no script, escapes what
# the database says, shows the reasons, diffs, failing guards and the graphs; filters and bad
# input behave as audit's; and Debian's chromium loads it headless without console errors and
# takes a screenshot that is not blank.
source "$(dirname "$0")/lib.sh"
command -v chromium > /dev/null || fail "chromium is not installed (scripts/setup.sh installs it)"
db="$TMP/c.db"
cat > "$TMP/batch.trace" <<'T'
tracecache 1
steps 5
dim B = [8, 8, 16, 4, 16]
input x : f32[B, 32] = uniform(seed=3, low=-1, high=1)
param w : f32[32, 16] = normal(seed=31, mean=0, std=0.2)
h = matmul(x, w)
y = relu(h)
output y
T
cat > "$TMP/rows.trace" <<'T'
tracecache 1
steps 2
dim R = [4, 2]
input x : f32[8, 4] = normal(seed=1)
r = reshape(x, shape=[R, -1])
output r
T
"$TC" run "$TMP/batch.trace" --db "$db" > /dev/null
"$TC" run "$TMP/rows.trace" --db "$db" --mode once --no-auto-dynamic > /dev/null
# A damaged executable: the next run finds it corrupt and recompiles.
sqlite3 "$db" "UPDATE executables SET blob = randomblob(length(blob)) WHERE rowid = (SELECT MIN(rowid) FROM executables)"
"$TC" run "$TMP/batch.trace" --db "$db" --steps 1 > /dev/null
# Hostile text in the audit log, as a damaged or forged database could hold.
sqlite3 "$db" "INSERT INTO events (time, pid, kind, graph_key, backend, reason, duration_ms, detail, options_digest,
  program, function) VALUES (strftime('%s','now'), 1, 'fallback', '00000000000000000000000000000000', 'cpu',
  'run failed', 0, '\"><img src=x onerror=alert(1)>', '', '<script>alert(1)</script>', 'f</td></table>')"

expect_exit 0 "$TC" report --db "$db" -o "$TMP/report.html"
grep -q "wrote .*report.html" "$TMP/out" || fail "report says what it wrote: $(cat "$TMP/out")"
/usr/bin/python3 - "$TMP/report.html" <<'PY'
import html.parser, re, sys
text = open(sys.argv[1], encoding="utf-8").read()
VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "wbr", "source"}

class Check(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.tags, self.urls, self.texts = [], [], [], []
    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "action", "srcset") and value:
                self.urls.append(value)
            assert not name.startswith("on"), f"an event handler attribute: {name}"
        if tag not in VOID:
            self.stack.append((tag, self.getpos()))
    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "xlink:href") and value:
                self.urls.append(value)
    def handle_endtag(self, tag):
        assert self.stack, f"</{tag}> closes nothing at {self.getpos()}"
        open_tag, pos = self.stack.pop()
        assert open_tag == tag, f"</{tag}> at {self.getpos()} closes <{open_tag}> opened at {pos}"
    def handle_data(self, data):
        self.texts.append(data)

c = Check()
c.feed(text)
c.close()
assert not c.stack, f"unclosed tags: {c.stack[:5]}"
assert c.tags[:3] == ["html", "head", "meta"], c.tags[:3]
# Self-contained: no script, no external stylesheet or image, every link inside the page.
for bad in ("script", "link", "img", "iframe", "object", "embed"):
    assert bad not in c.tags, f"<{bad}> in the page"
for url in c.urls:
    assert url.startswith("#"), f"a reference out of the page: {url}"
assert not re.search(r"url\(\s*['\"]?https?:", text), "a CSS url() to the network"
page = " ".join(c.texts)
# What a person came for: reasons, what differed and where, the failing guards, the problems.
for want in ("Summary", "hit rate", "saved by the cache", "Compiles and why", "new graph",
             "input 0 shape (dim 0): f32[8, 32] -> f32[16, 32]", "batch.trace:4 input x",
             "Recompiles (the guards that failed)", "scalar 0 'R': value expected 4, actual 2",
             "Guard entries", "Corrupt entries, fallbacks and failed writes", "corrupt", "checksum",
             "Cache size by tier", "Executables by backend"):
    assert want in page, f"the page lacks {want!r}"
# The node-by-node diff table of a compile, and the timeline chart (an inline SVG of our own).
assert "node by node: 1 difference " in page, "a compile's node-by-node diff"
assert text.count('<svg class="chart"') == 3, "one timeline per program/function (batch, rows, the forged one)"
# The graphs as pictures (Graphviz) or, without dot, as text with a note saying so.
assert ('class="node"' in text) or ("dot is not installed" in page), "graph pictures"
# Hostile text arrives as text.
assert "<script>alert(1)</script>" in page and '"><img src=x onerror=alert(1)>' in page, "escaped text kept"
print("html ok:", len(text), "bytes,", len(c.tags), "elements")
PY
[ -n "$(command -v dot)" ] && { grep -q 'class="node"' "$TMP/report.html" || fail "dot is installed: the graphs are drawn"; }

# A graph wider than the page opens at 100% in a scrolling pane under fit/100%/200% zoom buttons
# (CSS radio buttons, no script); a small one fits. Chromium draws the two zoom levels differently.
if command -v dot > /dev/null; then
  { echo "tracecache 1"; echo "steps 1"; echo "input x : f32[4, 8] = normal(seed=1)"
    for i in $(seq 1 40); do echo "a$i = relu(x)"; done
    echo "s1 = add(a1, a2)"; for i in $(seq 3 40); do echo "s$((i - 1)) = add(s$((i - 2)), a$i)"; done
    echo "output s39"; } > "$TMP/wide.trace"
  "$TC" run "$TMP/wide.trace" --db "$TMP/wide.db" > /dev/null
  "$TC" run "$TMP/batch.trace" --db "$TMP/wide.db" --steps 1 > /dev/null
  expect_exit 0 "$TC" report --db "$TMP/wide.db" -o "$TMP/wide.html"
  /usr/bin/python3 - "$TMP/wide.html" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
zooms = re.findall(r'<div class="zoom">(.*?)<div class="pic" style="--w:([0-9.]+)pt;--h:([0-9.]+)pt"><svg width="([0-9.]+)pt" height="([0-9.]+)pt"', text, re.S)
assert len(zooms) == 2, f"two zoomable pictures, found {len(zooms)}"
checked = {}
for n, (buttons, w, h, sw, sh) in enumerate(zooms):
    assert (w, h) == (sw, sh), "the pane's size is the SVG's own"
    names = set(re.findall(r'name="(zoom\d+)"', buttons))
    assert len(names) == 1, f"one radio group per picture: {names}"
    ids = re.findall(r'<input type="radio" class="(z[f12])" name="zoom\d+" id="([^"]+)"( checked)?>'
                     r'<label for="([^"]+)">([^<]+)</label>', buttons)
    assert [(c, label) for c, _, _, _, label in ids] == [("zf", "fit"), ("z1", "100%"), ("z2", "200%")], ids
    assert all(i == f for _, i, _, f, _ in ids), "each label names its button"
    on = [c for c, _, ch, _, _ in ids if ch]
    assert len(on) == 1, on
    checked[float(w)] = on[0]
wide, narrow = max(checked), min(checked)
assert wide * 4 / 3 > 1200 and checked[wide] == "z1", f"the wide graph ({wide}pt) opens at 100%: {checked}"
assert narrow * 4 / 3 < 1200 and checked[narrow] == "zf", f"the small graph ({narrow}pt) fits: {checked}"
for rule in (".zoom .zf:checked~.pic svg{max-width:100%;height:auto}",
             ".zoom .z2:checked~.pic svg{width:calc(2*var(--w));height:calc(2*var(--h))}"):
    assert rule in text, rule
print("zoom ok:", checked)
PY
  # Chromium draws the page with the wide graph at 100% and, in a copy, at fit; the radio dots are
  # hidden in both copies, so what differs is the drawing. The 100% page drawn twice is the same.
  /usr/bin/python3 - "$TMP/wide.html" "$TMP" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read().replace("</style>", ".zoom>input{display:none}</style>", 1)
group = re.search(r'name="(zoom\d+)" id="[^"]+" checked><label for="[^"]+">100%', text).group(1)
open(sys.argv[2] + "/z100.html", "w", encoding="utf-8").write(text)
text = text.replace(f'id="{group}-z1" checked>', f'id="{group}-z1">').replace(f'id="{group}-zf">', f'id="{group}-zf" checked>')
open(sys.argv[2] + "/zfit.html", "w", encoding="utf-8").write(text)
PY
  shot() {
    timeout 60 chromium --headless=new --no-sandbox --disable-gpu --user-data-dir="$TMP/chrome-zoom" --no-first-run \
      --disable-extensions --window-size=1280,5000 --screenshot="$TMP/$2.png" "file://$TMP/$1.html" > /dev/null 2>&1 \
      || fail "chromium --screenshot $1 failed"
  }
  shot z100 a; shot zfit b; shot z100 c
  [ "$(stat -c %s "$TMP/a.png")" -gt 20000 ] || fail "a screenshot of the zoomable page"
  cmp -s "$TMP/a.png" "$TMP/c.png" || fail "chromium draws the same page twice the same (else the next check says nothing)"
  cmp -s "$TMP/a.png" "$TMP/b.png" && fail "fit and 100% draw the wide graph the same"
fi

# show --dot: DOT text Graphviz accepts, one digraph per graph of a program; a forged program
# location cannot break out of its label.
"$TC" show "$TMP/batch.trace" --dot --steps 3 > "$TMP/batch.dot"
[ "$(grep -c '^digraph ' "$TMP/batch.dot")" = 2 ] || fail "show PROGRAM --dot: $(head -3 "$TMP/batch.dot")"
grep -q 'batch.trace:6 h' "$TMP/batch.dot" || fail "show --dot labels nodes with their program lines"
/usr/bin/python3 - "$db" <<'PY'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
key, text = con.execute("SELECT graph_key, sources FROM graph_sources WHERE program LIKE '%batch.trace' LIMIT 1").fetchone()
lines = text.split("\n")
lines[3] = 'evil" ] ; n0 -> n1 ; x [label="\\N }'
con.execute("UPDATE graph_sources SET sources = ? WHERE graph_key = ?", ("\n".join(lines), key))
con.commit()
print(key, file=open(sys.argv[1] + ".key", "w"))
PY
key=$(cat "$db.key")
"$TC" show "${key:0:10}" --db "$db" --dot > "$TMP/forged.dot"
if command -v dot > /dev/null; then
  dot -Tsvg "$TMP/forged.dot" > "$TMP/forged.svg" || fail "dot refuses show --dot's text: $(cat "$TMP/forged.dot")"
  grep -q 'evil&quot; ] ; n0 &#45;&gt; n1 ; x \[label=&quot;\\N }' "$TMP/forged.svg" || fail "the forged location is one label's text"
fi

# Without Graphviz on PATH the page says so and shows the graphs as text with their lines.
PATH="$TMP/no-such-dir" expect_exit 0 "$TC" report --db "$db" -o "$TMP/nodot.html" --program batch
grep -q "dot is not installed" "$TMP/nodot.html" || fail "no dot: the page says so"
grep -q "= matmul(%0, %1).*# .*batch.trace:6 h" "$TMP/nodot.html" || fail "no dot: the graphs' text"
grep -q 'class="node"' "$TMP/nodot.html" && fail "no dot: no Graphviz SVG"

# Filters as audit's; bad input is exit 2 with a message.
expect_exit 0 "$TC" report --db "$db" -o "$TMP/batch.html" --program batch
grep -q "rows.trace" "$TMP/batch.html" && fail "--program batch shows rows.trace"
grep -q "batch.trace" "$TMP/batch.html" || fail "--program batch shows batch.trace"
expect_exit 0 "$TC" report --db "$db" -o "$TMP/fn.html" --function rows.trace:step
grep -q "scalar 0 &#39;R&#39;: value expected 4, actual 2" "$TMP/fn.html" || fail "--function shows its recompile"
grep -q "batch.trace:4" "$TMP/fn.html" && fail "--function rows.trace:step shows batch.trace"
expect_exit 0 "$TC" report --db "$db" -o "$TMP/none.html" --since 2999-01-01
grep -q "No cache events yet" "$TMP/none.html" || fail "nothing since the future"
expect_exit 2 "$TC" report --db "$db"
grep -q "output" "$TMP/err" || fail "-o is required: $(cat "$TMP/err")"
expect_exit 2 "$TC" report --db "$TMP/missing.db" -o "$TMP/x.html"
grep -q "no cache database" "$TMP/err" || fail "missing db: $(cat "$TMP/err")"
[ ! -e "$TMP/x.html" ] || fail "no page is left behind on an error"
expect_exit 2 "$TC" report --db "$db" -o "$TMP/x.html" --since yesterday
grep -q "not a time" "$TMP/err" || fail "--since: $(cat "$TMP/err")"
expect_exit 2 "$TC" report --db "$db" -o "$TMP/no/such/dir/x.html"
grep -q "cannot write" "$TMP/err" || fail "unwritable -o: $(cat "$TMP/err")"
echo "not a database" > "$TMP/junk.db"
expect_exit 2 "$TC" report --db "$TMP/junk.db" -o "$TMP/x.html"
expect_exit 0 "$TC" report --help
grep -q "\-\-since" "$TMP/out" || fail "report --help"

# A real browser: the page loads, its DOM has the summary, no console errors, a screenshot.
chrome=(chromium --headless=new --no-sandbox --disable-gpu --user-data-dir="$TMP/chrome" --no-first-run
        --disable-extensions --window-size=1280,2000)
timeout 60 "${chrome[@]}" --enable-logging=stderr --v=0 --dump-dom "file://$TMP/report.html" \
  > "$TMP/dom.html" 2> "$TMP/chrome.log" || fail "chromium --dump-dom failed: $(tail -5 "$TMP/chrome.log")"
grep -q "Summary" "$TMP/dom.html" && grep -q "Compiles and why" "$TMP/dom.html" || fail "the DOM chromium loaded: $(head -c 400 "$TMP/dom.html")"
if grep -i "CONSOLE\|Uncaught\|net::ERR" "$TMP/chrome.log"; then fail "chromium reported errors loading the page"; fi
timeout 60 "${chrome[@]}" --screenshot="$TMP/report.png" "file://$TMP/report.html" > /dev/null 2>&1 \
  || fail "chromium --screenshot failed"
/usr/bin/python3 - "$TMP/report.png" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20000, f"a PNG of {len(data)} bytes"
pos, idat, ihdr = 8, b"", None
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR": ihdr = struct.unpack(">IIBBBBB", body)
    if kind == b"IDAT": idat += body
    pos += 12 + n
width, height, depth, color = ihdr[:4]
assert (width, height) == (1280, 2000) and depth == 8 and color in (2, 6), ihdr
bpp = 3 if color == 2 else 4
raw = zlib.decompressobj().decompress(idat, 2 + 400 * (1 + width * bpp))  # the top 400 rows
stride, prev, colors = width * bpp, bytearray(width * bpp), set()
for r in range(400):
    f, line = raw[r * (stride + 1)], bytearray(raw[r * (stride + 1) + 1:(r + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    if r % 4 == 0:
        colors.update(bytes(line[i:i + 3]) for i in range(0, stride, bpp * 4))
    prev = line
assert len(colors) > 30, f"a blank page? {len(colors)} colors in the summary"
print("screenshot ok:", len(data), "bytes,", len(colors), "colors in its top")
PY
echo ok
