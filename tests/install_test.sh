#!/usr/bin/env bash
# vitk as a user installs it: `cmake --install` into a temporary prefix, the C++ example built
# against it with find_package(vitk) and with pkg-config, run on the bundled samples away from
# the source tree, its top-1 labels checked against `vitk classify`'s; the installed executable
# finding its bundled model; and, when the Python module is built, `import vitk` from the prefix.
# With --deb, `cpack -G DEB` too, and the package's file list and Depends checked.
#
#   bash tests/install_test.sh BUILD_DIR SOURCE_DIR [--deb]
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd) deb=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }
prefix=$tmp/prefix
samples=("$src"/datasets/samples/0000-ankle-boot.png "$src"/datasets/samples/0001-pullover.png)

cmake --install "$build" --prefix "$prefix" > "$tmp/install.log"
for f in bin/vitk include/vitk/vitk.h include/vitk/error.h include/vitk/opencv.h \
         lib/cmake/vitk/vitkConfig.cmake lib/pkgconfig/vitk.pc share/vitk/models/fmnist-vit.h5; do
  [[ -e $prefix/$f ]] || fail "cmake --install left out $f"
done
ls "$prefix"/lib/libvitk.so.* > /dev/null || fail "no libvitk.so.* in $prefix/lib"
soname=$(objdump -p "$prefix"/lib/libvitk.so | awk '/SONAME/ {print $2}')
[[ $soname == libvitk.so.* ]] || fail "libvitk.so has no SONAME ($soname)"

# The labels vitk classify gives, as "path label" lines.
cd "$tmp"
"$prefix/bin/vitk" classify "${samples[@]}" --csv --top-k 1 | tail -n +2 |
  awk -F, '{print $1, $2}' > want.txt
[[ $(wc -l < want.txt) == "${#samples[@]}" ]] || fail "the installed vitk classified $(cat want.txt)"

# find_package(vitk)
cmake -S "$src/tools/examples" -B ex -DCMAKE_PREFIX_PATH="$prefix" > ex-configure.log ||
  { cat ex-configure.log; fail "configuring the example with find_package(vitk)"; }
cmake --build ex > ex-build.log || { cat ex-build.log; fail "building the example"; }
ex/classify "$prefix/share/vitk/models/fmnist-vit.h5" "${samples[@]}" > got.txt
tail -n +2 got.txt | awk -F'\t' '{label = $2; sub(/ [0-9.]+$/, "", label); print $1, label}' > got-labels.txt
diff want.txt got-labels.txt || fail "the example (find_package) and vitk classify disagree"

# pkg-config
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs vitk)
g++ -std=c++17 "$src/tools/examples/classify.cpp" $flags -Wl,-rpath,"$prefix/lib" -o classify-pc
./classify-pc "$prefix/share/vitk/models/fmnist-vit.h5" "${samples[@]}" | cmp - got.txt ||
  fail "the example built with pkg-config prints otherwise"

# The module, when built: imported from the prefix, not from the build tree.
if [[ -d $build/python/vitk ]]; then
  where=$(cd / && PYTHONPATH="$prefix/lib/python3/dist-packages" /usr/bin/python3 -c \
    'import vitk; print(vitk.__file__)')
  [[ $where == "$prefix"/* ]] || fail "import vitk found $where, not the prefix's"
fi

if [[ $deb == --deb ]]; then
  (cd "$build" && cpack -G DEB -B "$tmp/deb" > "$tmp/cpack.log") || { cat "$tmp/cpack.log"; fail "cpack"; }
  package=$(ls "$tmp"/deb/*.deb)
  dpkg-deb -c "$package" | awk '{print $6}' > files.txt
  for f in ./usr/bin/vitk ./usr/include/vitk/vitk.h ./usr/lib/cmake/vitk/vitkConfig.cmake \
           ./usr/lib/python3/dist-packages/vitk/__init__.py; do
    grep -qx "$f" files.txt || fail "the .deb lacks $f"
  done
  grep -q '^./usr/lib/libvitk.so' files.txt || fail "the .deb lacks libvitk.so"
  depends=$(dpkg-deb -f "$package" Depends)
  for p in libdnnl libopencv libhdf5 python3-numpy; do
    [[ $depends == *$p* ]] || fail "the .deb's Depends lack $p: $depends"
  done
fi
echo "install_test: OK"
