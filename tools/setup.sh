#!/usr/bin/env bash
# Installs the Debian 12 packages vitk needs to build, test and train on its default data, then
# optionally builds and tests. Safe to run again: with everything installed it touches nothing.
#
#   bash tools/setup.sh            install missing packages only
#   bash tools/setup.sh --build    ... and build into build/
#   bash tools/setup.sh --test     ... and build, then run ctest
#   bash tools/setup.sh --asan     build (and with --test, test) in build-asan/ with
#                                  AddressSanitizer and UndefinedBehaviorSanitizer; --test runs
#                                  the tests of everything that reads a file or an option
#                                  (tests/README.md says which and why)
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  # oneDNN's CMake package looks for OpenCL (Debian builds it with the OpenCL GPU runtime), and
  # Debian only recommends the OpenCL headers, which --no-install-recommends leaves out.
  libdnnl-dev ocl-icd-opencl-dev libopencv-dev libboost-program-options-dev libhdf5-dev hdf5-tools
  libgtest-dev libsentencepiece-dev zlib1g-dev python3
  # JSON (safetensors headers, Hugging Face config files, `vitk classify --json`): nlohmann/json,
  # header-only, so that vitk keeps no JSON parser or writer of its own.
  nlohmann-json3-dev
  # A TrueType font for UTF-8 labels in pictures (drawn by OpenCV's freetype module, which
  # libopencv-dev brings with libopencv-contrib-dev); without it labels fall back to ASCII.
  fonts-dejavu-core
  # Multi-machine training (`mpirun -np N vitk train`): Open MPI, rather than a transport of our own.
  libopenmpi-dev openmpi-bin
  # Hosts made of network namespaces for the multi-host tests (tools/netns_cluster.sh): ip and tc,
  # nft to lose packets at random, and NFQUEUE (iptables, libnetfilter_queue) to delay them on
  # kernels without netem; ping checks the link.
  iproute2 nftables iptables libnetfilter-queue-dev iputils-ping
  # The Python module (`import vitk`) and its tests: pybind11 over the C++ API, numpy arrays;
  # Pillow reads the test images into arrays as a Python user would.
  pybind11-dev python3-dev python3-numpy python3-pytest python3-pil
  # `cpack -G DEB` (tested): dpkg-shlibdeps works out Depends, and CPack finds the ELF files with file.
  dpkg-dev file
  dataset-fashion-mnist
)

usage() { sed -n '2,9s/^# \{0,1\}//p' "$0"; }
die() { echo "setup.sh: error: $*" >&2; exit 1; }

build=0 test=0 asan=0
for arg in "$@"; do
  case "$arg" in
    --build) build=1 ;;
    --test) build=1 test=1 ;;
    --asan) build=1 asan=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "setup.sh: error: unknown argument '$arg'" >&2; usage >&2; exit 2 ;;
  esac
done

# Print each command before running it, so a CI log shows what happened.
run() { echo "+ $*"; "$@"; }

# The repository root, wherever the script is called from.
cd "$(dirname "${BASH_SOURCE[0]}")/.."

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "setup.sh: all ${#packages[@]} packages are installed"
else
  echo "setup.sh: installing ${missing[*]}"
  if ((EUID == 0)); then
    as_root=()
  elif command -v sudo >/dev/null; then
    as_root=(sudo)
  else
    die "installing packages needs root: run as root or install sudo (missing: ${missing[*]})"
  fi
  # `env` rather than a variable assignment: sudo resets the environment it is given.
  run "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
  run "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
fi

# The sanitizer run's tests: every reader of files and options, end to end (checkpoints,
# safetensors, images, datasets, corpora, tokenizer, config files, metrics CSV, JSON), the
# crash-safety and training-state tests, and the fuzz harnesses' committed inputs. The numeric
# tests (ops, gradients, parity, attention kernels, training to an accuracy) read no input and are
# left to the plain build, so that CI (both builds) stays within 30 minutes on two cores.
sanitized_tests='^(Hostile|CliLimits|CliSwitches|Cli|CliDispatch|Checkpoint|TranslationCheckpoint|Safetensors|Import|FashionMnist|Idx|Folder|Csv|Loader|ImageIo|EvalGeometry|ResizeLikePil|Tokenizer|Tokenize|Parallel|PlotCli|PlotMetrics|MetricsCsvFile|AtomicFile|CrashSafety|TrainState|Json|JsonParserSelfTest|Classify|ClassifyOutput|BleuCli|Captions|CaptionNormalize|FinetuneLoad|Recipes|QuantizedCheckpoint|Quantize|Int8Scales|CaptionOutputs|SearchCeilings|SearchBytes|FolderLock|OutputFolders|MakeScenesFolders|Messages|TextCli)[.]|^fuzz_replay|^mpi_two_ranks$'

if ((build)); then
  if ((asan)); then
    dir="build-asan"
    # Line numbers in sanitizer reports (-g1) at -O1, which halves the build time of -O2 -g.
    # Only the test files of those tests (tests/CMakeLists.txt, VITK_SANITIZE_SUBSET).
    config=(-DVITK_SANITIZE=ON -DVITK_SANITIZE_SUBSET=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
            "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1")
  else
    dir=build
    config=()
  fi
  run cmake -S . -B "$dir" "${config[@]}"
  run cmake --build "$dir" -j"$(nproc)"
  if ((test && asan)); then
    run ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" -R "$sanitized_tests"
  elif ((test)); then
    run ctest --test-dir "$dir" --output-on-failure
  fi
fi
