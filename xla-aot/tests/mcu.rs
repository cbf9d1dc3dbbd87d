//! Microcontroller targets (Cortex-M4F/M7/M33/M55): freestanding libraries with their weights in
//! the named section and their flash/RAM figures in the header, Helium code for the M55, and
//! simplenet and mlp run bare metal on QEMU's mps2-an386 (Cortex-M4), mps3-an547 (Cortex-M55),
//! mps2-an500 (Cortex-M7) and mps2-an505 (Cortex-M33) through `examples/mcu-app`, compared with
//! the interpreter.
//!
//! The parts that need `arm-none-eabi-gcc` (with newlib) and `qemu-system-arm` print a SKIP line
//! and pass when the tools are missing, unless `XLA_AOT_MCU=1` (set by `scripts/test.sh`, which
//! installs them: `apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm`).

mod common;

use common::{repo, scratch};
use std::path::Path;
use std::process::Command;
use xla_aot::codegen::Options;
use xla_aot::compile::{CompileOptions, compile_model};
use xla_aot::emit::footprint::sections;
use xla_aot::front::load_spec;
use xla_aot::interp::evaluate;
use xla_aot::ir::{DType, Literal, Module};
use xla_aot::target::{Optimize, Target};

/// The models run on the boards.
const MODELS: &[&str] = &["simplenet", "mlp", "ds_cnn"];

/// The keyword-spotting budget the DS-CNN must fit with `--optimize size` (f32): a 256 KiB flash,
/// 64 KiB SRAM part (STM32F4x1, nRF52832 class).
const DS_CNN_FLASH: u64 = 256 * 1024;
const DS_CNN_RAM: u64 = 64 * 1024;

/// Largest |compiled − interpreter| allowed, relative to max(1, |interpreter|): the 1e-5.
/// Both compute in f32; only the order of the sums differs.
const BOARD_TOLERANCE: f64 = 1e-5;

/// Longest a board run may take (a run takes well under a second; QEMU stuck in a fault handler
/// would spin forever).
const QEMU_TIMEOUT_S: &str = "120";

/// An emulated board: the xla-aot target, QEMU machine, linker script and GCC CPU flags.
struct Board {
    target: &'static str,
    machine: &'static str,
    /// The linker script of `examples/mcu-app` (without `.ld`).
    script: &'static str,
    cpu_flags: &'static [&'static str],
}

const BOARDS: &[Board] = &[
    Board {
        target: "cortex-m4f",
        machine: "mps2-an386",
        script: "mps2-an386",
        cpu_flags: &["-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16"],
    },
    Board {
        target: "cortex-m55",
        machine: "mps3-an547",
        script: "mps3-an547",
        cpu_flags: &["-mcpu=cortex-m55"],
    },
    Board {
        target: "cortex-m7",
        machine: "mps2-an500",
        script: "mps2-an386",
        cpu_flags: &["-mcpu=cortex-m7", "-mfpu=fpv5-d16"],
    },
    Board {
        target: "cortex-m33",
        machine: "mps2-an505",
        script: "mps2-an505",
        cpu_flags: &["-mcpu=cortex-m33"],
    },
];

fn model(name: &str) -> Module {
    load_spec(&repo().join("examples").join(name).join("model.yaml"))
        .unwrap()
        .module
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether the board tools are installed; prints the SKIP line when not.
fn board_tools(test: &str) -> bool {
    let missing: Vec<&str> = ["arm-none-eabi-gcc", "qemu-system-arm"]
        .into_iter()
        .filter(|t| !have(t))
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var("XLA_AOT_MCU").as_deref() != Ok("1"),
        "XLA_AOT_MCU=1 but {} missing (apt-get install -y gcc-arm-none-eabi \
         libnewlib-arm-none-eabi qemu-system-arm)",
        missing.join(" and ")
    );
    eprintln!(
        "SKIP {test}: {} not installed (apt-get install -y gcc-arm-none-eabi \
         libnewlib-arm-none-eabi qemu-system-arm)",
        missing.join(" and ")
    );
    false
}

/// The inputs `examples/mcu-app/main.c` computes: element k of input i is
/// ((k·7 + i·13) mod 17 − 8) / 8.
fn board_inputs(m: &Module) -> Vec<Literal> {
    m.entry
        .parameters()
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let dims = m.entry.inst(p).shape.dims.clone();
            let n: usize = dims.iter().product();
            let v: Vec<f32> = (0..n)
                .map(|k| ((k * 7 + i * 13) % 17) as f32 - 8.0)
                .map(|x| x / 8.0)
                .collect();
            Literal::from_f32(dims, &v)
        })
        .collect()
}

/// Builds `examples/mcu-app` for `board` with the library of `m` compiled into `dir` (with
/// `external`, `--weights external`: the app reads `<name>.weights` over semihosting); returns
/// the ELF path.
fn build_app(
    m: &Module,
    board: &Board,
    optimize: Optimize,
    external: bool,
    dir: &Path,
) -> std::path::PathBuf {
    let mut t = Target::resolve(board.target).unwrap();
    t.optimize = optimize;
    let mut opts = CompileOptions::default();
    opts.codegen.weights_blob = external;
    let art = compile_model(m, &t, &opts).unwrap();
    let name = &art.name;
    std::fs::write(dir.join(format!("lib{name}.a")), &art.archive).unwrap();
    std::fs::write(dir.join(format!("{name}.h")), &art.header).unwrap();
    let mut weights_defines = Vec::new();
    if let Some(blob) = &art.weights_blob {
        let path = dir.join(format!("{name}.weights"));
        std::fs::write(&path, blob).unwrap();
        weights_defines.push(format!(
            "-DWEIGHTS_BYTES={}_WEIGHTS_FILE_BYTES",
            name.to_ascii_uppercase()
        ));
        weights_defines.push(format!("-DWEIGHTS_PATH=\"{}\"", path.display()));
    }
    let sizes = |dims: Vec<Vec<usize>>| {
        let v: Vec<String> = dims
            .iter()
            .map(|d| d.iter().product::<usize>().to_string())
            .collect();
        format!("{{{}}}", v.join(","))
    };
    let int8_io = (0..m.entry.parameters().len()).all(|k| m.input_dtype(k) == DType::I8)
        && (0..m.entry.outputs.len()).all(|k| m.output_dtype(k) == DType::I8);
    if !int8_io {
        for k in 0..m.entry.parameters().len() {
            assert_eq!(
                m.input_dtype(k),
                DType::F32,
                "the app feeds f32 (or, with IO_INT8, int8) inputs"
            );
        }
    }
    let ins = sizes(
        m.entry
            .parameters()
            .iter()
            .map(|&p| m.entry.inst(p).shape.dims.clone())
            .collect(),
    );
    let outs = sizes(
        m.entry
            .outputs
            .iter()
            .map(|o| m.entry.inst(o.value).shape.dims.clone())
            .collect(),
    );
    let io_floats: usize = m
        .entry
        .parameters()
        .iter()
        .map(|&p| m.entry.inst(p).shape.element_count())
        .chain(
            m.entry
                .outputs
                .iter()
                .map(|o| m.entry.inst(o.value).shape.element_count()),
        )
        .sum();
    let upper = name.to_ascii_uppercase();
    let app = repo().join("examples/mcu-app");
    let elf = dir.join(format!("{name}-{}.elf", board.machine));
    let out = Command::new("arm-none-eabi-gcc")
        .args(board.cpu_flags)
        .args([
            "-mthumb",
            "-mfloat-abi=hard",
            "-O2",
            "-std=c11",
            "-Wall",
            "-Werror",
        ])
        .args(["--specs=rdimon.specs", "-nostartfiles", "-T"])
        .arg(app.join(format!("{}.ld", board.script)))
        .arg("-include")
        .arg(dir.join(format!("{name}.h")))
        .arg(format!("-DMODEL={name}"))
        .arg(format!("-DARENA_SIZE={upper}_ARENA_SIZE"))
        .arg(format!("-DARENA_ALIGN={upper}_ARENA_ALIGN"))
        .arg(format!("-DIN_SIZES={ins}"))
        .arg(format!("-DOUT_SIZES={outs}"))
        .arg(format!("-DIO_FLOATS={}", io_floats.max(20000)))
        .args(int8_io.then_some("-DIO_INT8"))
        .args(&weights_defines)
        .arg(app.join("main.c"))
        .arg(app.join("start.c"))
        .arg(dir.join(format!("lib{name}.a")))
        .arg("-o")
        .arg(&elf)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name} for {}: arm-none-eabi-gcc failed:\n{}",
        board.machine,
        String::from_utf8_lossy(&out.stderr)
    );
    elf
}

/// Runs `elf` on `board` and parses its outputs (`out<i>: <hex f32 bits>...`, `status 0`);
/// also returns the whole output.
fn run_on_board(elf: &Path, board: &Board) -> (Vec<Vec<f32>>, String) {
    // QEMU's stdout into a file, not a pipe: QEMU makes its stdio non-blocking, and a pipe that
    // fills while the test machine is busy loses semihosting output (seen: 1 026 of 16 384
    // values missing).
    let log = elf.with_extension("out");
    let r = Command::new("timeout")
        .arg(QEMU_TIMEOUT_S)
        .args(["qemu-system-arm", "-M", board.machine])
        .args(["-nographic", "-semihosting", "-kernel"])
        .arg(elf)
        .stdout(std::fs::File::create(&log).unwrap())
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        r.status.success() && text.contains("status 0"),
        "{} on {}: {:?}\n{}\n{}",
        elf.display(),
        board.machine,
        r.status,
        text.chars().take(2000).collect::<String>(),
        String::from_utf8_lossy(&r.stderr)
    );
    let outputs = text
        .lines()
        .filter(|l| l.starts_with("out"))
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .map(|h| f32::from_bits(u32::from_str_radix(h, 16).unwrap()))
                .collect()
        })
        .collect();
    (outputs, text)
}

/// The largest |a − e| / max(1, |e|).
fn worst_error(a: &[f32], e: &[f32]) -> f64 {
    a.iter()
        .zip(e)
        .map(|(&a, &e)| (a as f64 - e as f64).abs() / (e.abs() as f64).max(1.0))
        .fold(0.0f64, f64::max)
}

#[test]
fn models_run_on_emulated_boards_and_match_the_interpreter() {
    if !board_tools("models_run_on_emulated_boards_and_match_the_interpreter") {
        return;
    }
    for name in MODELS {
        let m = model(name);
        let expected = evaluate(&m, &board_inputs(&m)).unwrap();
        // Size-first code (the microcontroller default) on every board; the speed path's
        // unrolled kernels too on the M4F and M55 (not the DS-CNN's on the M4F: its 64 scalar
        // channel groups take LLVM 17 s to compile in a debug build).
        let speed_boards = if *name == "ds_cnn" { 1..2 } else { 0..2 };
        let runs = BOARDS
            .iter()
            .map(|b| (b, Optimize::Size))
            .chain(BOARDS[speed_boards].iter().map(|b| (b, Optimize::Speed)));
        for (board, optimize) in runs {
            let dir = scratch(&format!("mcu-{name}-{}-{optimize:?}", board.machine));
            let (outputs, _) = run_on_board(&build_app(&m, board, optimize, false, &dir), board);
            assert_eq!(outputs.len(), expected.len());
            for (i, (a, e)) in outputs.iter().zip(&expected).enumerate() {
                let e = e.to_f32_vec().unwrap();
                assert_eq!(a.len(), e.len(), "{name} output {i} on {}", board.machine);
                let worst = a
                    .iter()
                    .zip(&e)
                    .map(|(&a, &e)| (a as f64 - e as f64).abs() / (e.abs() as f64).max(1.0))
                    .fold(0.0f64, f64::max);
                eprintln!(
                    "{name} output {i} on {} ({}, {optimize:?}): worst error {worst:.2e}",
                    board.machine, board.target
                );
                assert!(
                    worst <= BOARD_TOLERANCE,
                    "{name} output {i} on {}: error {worst:.2e} > {BOARD_TOLERANCE:e}",
                    board.machine
                );
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// A TFLite model as the converter writes it (the keyword-spotting DS-CNN of
/// scripts/tflite_models.py, NHWC, BatchNorm folded by the converter) on the Cortex-M4F and
/// Cortex-M55 boards equals the interpreter, which tests/tflite.rs checks against TFLite Micro.
#[test]
fn a_tflite_model_runs_on_the_m4_and_m55_boards() {
    let test = "a_tflite_model_runs_on_the_m4_and_m55_boards";
    let Some(dir) = std::env::var_os("XLA_AOT_TFLITE_DIR") else {
        eprintln!("SKIP {test}: XLA_AOT_TFLITE_DIR is not set (scripts/test.sh sets it)");
        return;
    };
    if !board_tools(test) {
        return;
    }
    let path = std::path::PathBuf::from(dir).join("dscnn_f32/model.tflite");
    let m = load_spec(&path).unwrap().module;
    let expected = evaluate(&m, &board_inputs(&m)).unwrap();
    for board in BOARDS
        .iter()
        .filter(|b| ["cortex-m4f", "cortex-m55"].contains(&b.target))
    {
        let dir = scratch(&format!("mcu-tflite-{}", board.machine));
        let (outputs, _) = run_on_board(&build_app(&m, board, Optimize::Size, false, &dir), board);
        assert_eq!(outputs.len(), expected.len());
        for (a, e) in outputs.iter().zip(&expected) {
            let worst = worst_error(a, &e.to_f32_vec().unwrap());
            eprintln!(
                "tflite dscnn on {} ({}): worst error {worst:.2e}",
                board.machine, board.target
            );
            assert!(
                worst <= BOARD_TOLERANCE,
                "tflite dscnn on {}: {worst:.2e}",
                board.machine
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The inputs `examples/mcu-app/main.c` computes with `-DIO_INT8`: element k of input i is
/// ((k·7 + i·13) mod 17 − 8) · 15.
fn board_inputs_i8(m: &Module) -> Vec<Literal> {
    m.entry
        .parameters()
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let dims = m.entry.inst(p).shape.dims.clone();
            let n: usize = dims.iter().product();
            let v: Vec<i32> = (0..n)
                .map(|k| (((k * 7 + i * 13) % 17) as i32 - 8) * 15)
                .collect();
            Literal::from_i32(dims, &v)
        })
        .collect()
}

/// Runs the int8-I/O `.tflite` models `cases` under `root` on `boards` (size-first code, and
/// speed-first code too on the boards whose target `speed_on` names) and checks each output
/// against the interpreter's, integer for integer.
fn int8_tflite_on_boards(root: &Path, cases: &[&str], boards: &[&Board], speed_on: &[&str]) {
    for case in cases {
        let m = load_spec(&root.join(case).join("model.tflite"))
            .unwrap()
            .module;
        let expected = evaluate(&m, &board_inputs_i8(&m)).unwrap();
        let runs = boards.iter().map(|b| (*b, Optimize::Size)).chain(
            boards
                .iter()
                .filter(|b| speed_on.contains(&b.target))
                .map(|b| (*b, Optimize::Speed)),
        );
        for (board, optimize) in runs {
            let dir = scratch(&format!("mcu-{case}-{}-{optimize:?}", board.machine));
            let (outputs, _) = run_on_board(&build_app(&m, board, optimize, false, &dir), board);
            assert_eq!(outputs.len(), expected.len());
            for (k, (a, e)) in outputs.iter().zip(&expected).enumerate() {
                let e: Vec<f32> = e.to_f64_vec().iter().map(|&x| x as f32).collect();
                let bad = a.iter().zip(&e).filter(|(x, y)| x != y).count();
                assert_eq!(
                    bad, 0,
                    "{case} output {k} on {} ({optimize:?}): {bad} integers differ",
                    board.machine
                );
            }
            eprintln!(
                "{case} on {} ({}, {optimize:?}): equal",
                board.machine, board.target
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// int8 TFLite models (converter-written: a convolution, a depthwise convolution with depth
/// multiplier 2, a dense layer, an average pool, an add, and a linear depthwise layer whose
/// output is stored as biased bytes between two convolutions (`codegen/cpu/byte_storage.rs`),
/// each with TFLite Micro's fixed-point requantization, `front/tflite/int8.rs`) on every board
/// equal the interpreter
/// integer for integer; tests/tflite.rs checks the interpreter against TFLite Micro. On the M4F,
/// M7 and M33 the products run on `smlad`.
#[test]
fn tflite_int8_models_run_on_every_board_bit_for_bit() {
    let test = "tflite_int8_models_run_on_every_board_bit_for_bit";
    let Some(root) = std::env::var_os("XLA_AOT_TFLITE_DIR") else {
        eprintln!("SKIP {test}: XLA_AOT_TFLITE_DIR is not set (scripts/test.sh sets it)");
        return;
    };
    if !board_tools(test) {
        return;
    }
    let all: Vec<&Board> = BOARDS.iter().collect();
    int8_tflite_on_boards(
        Path::new(&root),
        &[
            "conv2d_i8",
            "depthwise_mult2_i8",
            "fully_connected_i8",
            "avgpool_i8",
            "add_i8",
            "dw_linear_i8",
        ],
        &all,
        &["cortex-m4f"],
    );
}

/// MLPerf Tiny's int8 reference models as shipped (opt-in: `$XLA_AOT_MLPERF_TINY_DIR`, written
/// by bench/mlperf_tiny.py from a local checkout of mlcommons/tiny) on the Cortex-M4F and
/// Cortex-M55 boards equal the interpreter integer for integer (tests/tflite.rs checks the
/// interpreter against TFLite Micro on the same models).
#[test]
fn mlperf_tiny_int8_models_run_on_the_m4_and_m55_boards() {
    let test = "mlperf_tiny_int8_models_run_on_the_m4_and_m55_boards";
    let Some(root) = std::env::var_os("XLA_AOT_MLPERF_TINY_DIR") else {
        eprintln!("SKIP {test}: XLA_AOT_MLPERF_TINY_DIR is not set (bench/mlperf_tiny.py)");
        return;
    };
    if !board_tools(test) {
        return;
    }
    let m4_m55: Vec<&Board> = BOARDS
        .iter()
        .filter(|b| ["cortex-m4f", "cortex-m55"].contains(&b.target))
        .collect();
    int8_tflite_on_boards(
        Path::new(&root),
        &[
            "kws_ref_model",
            "vww_96_int8",
            "pretrainedResnet_quant",
            "ad01_int8",
            "str_ww_ref_model",
        ],
        &m4_m55,
        &["cortex-m4f", "cortex-m55"],
    );
}

/// Every Cortex-M target compiles both models; the weights (those of the code object and of the
/// data object) sit in `.rodata.xla_aot.<name>` or the section given, no other read-only data
/// section holds them, and the header's figures are the objects' section sizes.
#[test]
fn weights_sit_in_the_named_section_and_the_header_states_the_sizes() {
    for target in ["cortex-m4f", "cortex-m7", "cortex-m33", "cortex-m55"] {
        let t = Target::resolve(target).unwrap();
        for name in MODELS {
            let m = model(name);
            for given in [None, Some(".flash_bank2.weights")] {
                let opts = CompileOptions {
                    weights_section: given.map(String::from),
                    code_section: given.map(|_| ".itcm_text".to_string()),
                    ..CompileOptions::default()
                };
                let art = compile_model(&m, &t, &opts).unwrap();
                let section = given.map_or(format!(".rodata.xla_aot.{name}"), String::from);
                let mut objects = vec![art.object.as_slice()];
                objects.extend(art.weights_object.clone().map(|r| &art.archive[r]));
                let mut in_section = 0;
                for o in &objects {
                    let s = sections(o).expect("an ELF object");
                    assert!(
                        s.iter().all(|s| s.name != ".rodata"),
                        "{name} for {target}: a plain .rodata section"
                    );
                    in_section += s
                        .iter()
                        .filter(|s| s.name == section)
                        .map(|s| s.size)
                        .sum::<u64>();
                }
                assert!(in_section > 0, "{name} for {target}: nothing in {section}");
                let define = |key: &str| header_define(&art.header, name, key);
                assert_eq!(define("WEIGHTS_BYTES"), in_section);
                if given.is_some() {
                    // --code-section: all the code there.
                    let code: u64 = sections(&art.object)
                        .unwrap()
                        .iter()
                        .filter(|s| s.name == ".itcm_text")
                        .map(|s| s.size)
                        .sum();
                    assert_eq!(code, define("TEXT_BYTES"), "{name} for {target}");
                    assert!(art.header.contains("_CODE_SECTION \".itcm_text\""));
                }
                assert!(
                    art.header
                        .contains(&format!("_WEIGHTS_SECTION \"{section}\"")),
                    "{name}: header names the section"
                );
                assert_eq!(
                    define("RAM_BYTES"),
                    define("DATA_BYTES") + define("BSS_BYTES") + art.plan.arena_size as u64
                );
                if have("arm-none-eabi-size") && given.is_none() {
                    check_against_size(&art, define("FLASH_BYTES"), define("BSS_BYTES"));
                }
            }
        }
    }
}

/// The entry constant an object symbol of model `name` holds: `[.L]<name>.const.<i>` in the
/// code object, `<name>_weight<i>` in the data object.
fn constant_symbol(name: &str, symbol: &str) -> Option<u32> {
    let s = symbol
        .strip_prefix(".L")
        .unwrap_or(symbol)
        .strip_prefix(name)?;
    s.strip_prefix(".const.")
        .or_else(|| s.strip_prefix("_weight"))?
        .parse()
        .ok()
}

/// `.rodata` per kernel: read back with the `object` crate's ELF reader (not the compiler's),
/// each kernel's `rodata_bytes` (manifest and header) is the size of the constants only it reads,
/// the constants several kernels read are `rodata_shared`, and the kernels + shared + other add up
/// to the read-only sections' bytes, which are the header's `RODATA_BYTES`.
#[test]
fn rodata_per_kernel_adds_up_to_the_elf_sections() {
    use object::elf::{SHF_ALLOC, SHF_EXECINSTR, SHF_WRITE};
    use object::read::archive::ArchiveFile;
    use object::read::elf::{ElfFile32, SectionHeader};
    use object::{Object, ObjectSymbol};
    for target in ["cortex-m4f", "cortex-m55"] {
        let t = Target::resolve(target).unwrap();
        for name in MODELS {
            let m = model(name);
            let art = compile_model(&m, &t, &CompileOptions::default()).unwrap();
            // Every read-only section and every constant's symbol of the archive's members.
            let archive = ArchiveFile::parse(art.archive.as_slice()).unwrap();
            let (mut rodata, mut sizes) = (0u64, std::collections::HashMap::new());
            for member in archive.members() {
                let data = member.unwrap().data(art.archive.as_slice()).unwrap();
                let elf = ElfFile32::<object::LittleEndian>::parse(data).unwrap();
                let endian = elf.endian();
                let is_rodata = |s: &object::read::elf::ElfSection32<object::LittleEndian>| {
                    let flags = s.elf_section_header().sh_flags(endian).0;
                    flags & (SHF_ALLOC.0 | SHF_WRITE.0 | SHF_EXECINSTR.0) == SHF_ALLOC.0
                };
                for s in elf.sections().filter(|s| is_rodata(s)) {
                    rodata += u64::from(s.elf_section_header().sh_size(endian));
                }
                for sym in elf.symbols() {
                    let Some(i) = constant_symbol(name, sym.name().unwrap()) else {
                        continue;
                    };
                    let Some(sec) = sym.section_index() else {
                        continue;
                    };
                    if is_rodata(&elf.section_by_index(sec).unwrap()) && sym.size() > 0 {
                        sizes.insert(i, sym.size());
                    }
                }
            }
            let manifest: serde_json::Value = serde_json::from_str(&art.manifest).unwrap();
            let kernels = manifest["kernels"].as_array().unwrap();
            let mem = &manifest["memory"];
            let readers = |i: u32| {
                art.kernels
                    .iter()
                    .filter(|k| k.constants.contains(&i))
                    .count()
            };
            let (mut sum, mut shared) = (0u64, 0u64);
            for (&i, &size) in &sizes {
                if readers(i) > 1 {
                    shared += size;
                }
            }
            for (k, info) in kernels.iter().zip(&art.kernels) {
                let want: u64 = info
                    .constants
                    .iter()
                    .filter(|&&i| readers(i) == 1)
                    .filter_map(|i| sizes.get(i))
                    .sum();
                let got = k["rodata_bytes"].as_u64().unwrap();
                assert_eq!(got, want, "{name} on {target}: {}", info.name);
                let line = format!(
                    " *   {:<w$}  text {:>7}  rodata {got:>8}",
                    info.name,
                    k["text_bytes"].as_u64().unwrap(),
                    w = art.kernels.iter().map(|k| k.name.len()).max().unwrap()
                );
                assert!(art.header.contains(&line), "{name}: no `{line}`");
                sum += got;
            }
            let define = |key: &str| header_define(&art.header, name, key);
            assert_eq!(mem["rodata_shared"].as_u64(), Some(shared), "{name}");
            assert_eq!(define("RODATA_SHARED_BYTES"), shared);
            let other = mem["rodata_other"].as_u64().unwrap();
            assert_eq!(define("RODATA_OTHER_BYTES"), other);
            assert_eq!(sum + shared + other, rodata, "{name} on {target}");
            assert_eq!(define("RODATA_BYTES"), rodata, "{name} on {target}");
            // The constants are most of it: what is left is padding and unwind tables.
            assert!(
                other < 1024,
                "{name} on {target}: {other} bytes unattributed"
            );
            eprintln!(
                "{name} on {target}: rodata {rodata} B = kernels {sum} + shared {shared} + other {other}"
            );
        }
    }
    // A real figure: the DS-CNN's first pointwise convolution reads its 64x64 f32 weights and its
    // 64 biases, nothing else.
    let art = compile_model(
        &model("ds_cnn"),
        &Target::resolve("cortex-m4f").unwrap(),
        &CompileOptions::default(),
    )
    .unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&art.manifest).unwrap();
    let pw1 = manifest["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "ds_cnn_k2_pw1_relu")
        .unwrap();
    assert_eq!(pw1["rodata_bytes"].as_u64(), Some((64 * 64 + 64) * 4));
}

/// `arm-none-eabi-size` of the library: its text + data columns summed equal the header's flash
/// bytes, its bss column the header's; `arm-none-eabi-nm -u` lists only what another member of
/// the library defines (the weights).
fn check_against_size(art: &xla_aot::emit::Artefacts, flash: u64, bss: u64) {
    let dir = scratch(&format!("mcu-size-{}", art.name));
    let lib = dir.join(format!("lib{}.a", art.name));
    std::fs::write(&lib, &art.archive).unwrap();
    let out = Command::new("arm-none-eabi-size")
        .arg(&lib)
        .output()
        .unwrap();
    let (mut text_data, mut bss_sum) = (0u64, 0u64);
    for l in String::from_utf8_lossy(&out.stdout).lines().skip(1) {
        let f: Vec<u64> = l
            .split_whitespace()
            .take(3)
            .map(|x| x.parse().unwrap())
            .collect();
        text_data += f[0] + f[1];
        bss_sum += f[2];
    }
    assert_eq!((text_data, bss_sum), (flash, bss), "{}", art.name);
    let defined = Command::new("arm-none-eabi-nm")
        .args(["-g", "--defined-only"])
        .arg(&lib)
        .output()
        .unwrap();
    let defined = String::from_utf8_lossy(&defined.stdout).into_owned();
    let undefined = Command::new("arm-none-eabi-nm")
        .arg("-u")
        .arg(&lib)
        .output()
        .unwrap();
    let missing: Vec<String> = String::from_utf8_lossy(&undefined.stdout)
        .lines()
        .filter(|l| !l.is_empty() && !l.ends_with(':'))
        .map(|l| l.split_whitespace().last().unwrap().to_string())
        .filter(|s| !defined.lines().any(|d| d.ends_with(&format!(" {s}"))))
        .collect();
    assert!(missing.is_empty(), "{} needs {missing:?}", art.name);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The M55's kernels use Helium: fused multiply-adds on q registers; the M4F's the scalar FPU.
#[test]
fn cortex_m55_code_has_helium_fma_and_m4f_scalar_fpu_code() {
    let m = model("simplenet");
    let asm = |target: &str| {
        let opts = CompileOptions {
            codegen: Options {
                assembly: true,
                ..Options::default()
            },
            ..CompileOptions::default()
        };
        compile_model(&m, &Target::resolve(target).unwrap(), &opts)
            .unwrap()
            .assembly
            .unwrap()
    };
    let m55 = asm("cortex-m55");
    let q_fma = m55.lines().filter(|l| l.contains("vfma.f32\tq")).count();
    assert!(q_fma > 0, "no vfma.f32 on q registers in the M55 code");
    let m4 = asm("cortex-m4f");
    // LLVM splits `fmuladd` into vmul + vadd for the M4 (its vfma is no faster).
    assert!(
        m4.lines()
            .any(|l| l.contains("vmul.f32\ts") || l.contains("vfma.f32\ts"))
            && !m4.contains("\tq0"),
        "M4F code should use the scalar FPU (s registers) and no q registers"
    );
    eprintln!("M55 simplenet: {q_fma} vfma.f32 on q registers");
    // The object itself, disassembled by binutils for ARMv8.1-M (when installed).
    if have("arm-none-eabi-objdump") {
        let art = compile_model(
            &m,
            &Target::resolve("cortex-m55").unwrap(),
            &CompileOptions::default(),
        )
        .unwrap();
        let dir = scratch("mcu-objdump");
        let obj = dir.join("simplenet.o");
        std::fs::write(&obj, &art.object).unwrap();
        let out = Command::new("arm-none-eabi-objdump")
            .args(["-d", "-m", "armv8.1-m.main"])
            .arg(&obj)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let in_object = text.lines().filter(|l| l.contains("vfma.f32\tq")).count();
        assert!(in_object > 0, "objdump finds no vfma.f32 on q registers");
        eprintln!("M55 simplenet object: {in_object} vfma.f32 on q registers (objdump)");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `--optimize size` keeps the DS-CNN within a 256 KiB flash and 64 KiB RAM part on the M4F and
/// the M55, and its code is far smaller than the speed path's (compared on the M55: the M4F's
/// speed path takes 17 s to compile in a debug build; measured there: 219 316 B of text against
/// 24 386 B).
#[test]
fn ds_cnn_fits_256k_flash_and_64k_ram_with_size_first_code() {
    let m = model("ds_cnn");
    for target in ["cortex-m4f", "cortex-m55"] {
        let figures = |optimize: Optimize| {
            let mut t = Target::resolve(target).unwrap();
            t.optimize = optimize;
            let art = compile_model(&m, &t, &CompileOptions::default()).unwrap();
            let json: serde_json::Value = serde_json::from_str(&art.manifest).unwrap();
            let mem = &json["memory"];
            let get = |k: &str| mem[k].as_u64().unwrap();
            // Each kernel's code; the rest of .text is the entry points.
            let kernels: Vec<u64> = json["kernels"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k["text_bytes"].as_u64().unwrap())
                .collect();
            let sum: u64 = kernels.iter().sum();
            assert!(sum <= get("text") && sum * 10 > get("text") * 9);
            // Size first, kernels of one shape keep one body (`mergefunc`): the others have 0
            // bytes of their own (the DS-CNN's last three depthwise and two of its pointwise
            // kernels; the fourth pointwise one has the next layer's batch norm fused).
            let shared = kernels.iter().filter(|&&t| t == 0).count();
            assert_eq!(shared, if optimize == Optimize::Size { 5 } else { 0 });
            (get("text"), get("flash"), get("ram"))
        };
        let (text, flash, ram) = figures(Optimize::Size);
        eprintln!("ds_cnn on {target}: size-first text {text} B, flash {flash} B, RAM {ram} B");
        assert!(
            flash <= DS_CNN_FLASH && ram <= DS_CNN_RAM,
            "{target}: flash {flash}, RAM {ram}"
        );
        if target == "cortex-m55" {
            let (speed_text, ..) = figures(Optimize::Speed);
            eprintln!("ds_cnn on {target}: speed-first text {speed_text} B");
            assert!(
                text * 3 < speed_text * 2,
                "{target}: {text} vs {speed_text}"
            );
        }
    }
}

/// `examples/mcu-rust` (no_std, no_main, `include_model!`) built for `thumbv7em-none-eabihf` and
/// run under QEMU: its output, in the file `XLA_AOT_MCU_RUST_OUTPUT` names, matches the
/// interpreter. `.ci/run` writes it:
/// `(cd examples/mcu-rust && cargo run -q --target thumbv7em-none-eabihf) > target/mcu-rust.out`
/// (a cargo build inside this test would wait on the lock of the build running it).
#[test]
fn rust_no_std_example_matches_the_interpreter() {
    let Ok(path) = std::env::var("XLA_AOT_MCU_RUST_OUTPUT") else {
        eprintln!(
            "SKIP rust_no_std_example_matches_the_interpreter: set XLA_AOT_MCU_RUST_OUTPUT to the \
             output of `cargo run --target thumbv7em-none-eabihf` in examples/mcu-rust"
        );
        return;
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(text.lines().any(|l| l == "done"), "{text}");
    for name in ["mlp", "ds_cnn"] {
        let m = model(name);
        let expected = evaluate(&m, &board_inputs(&m)).unwrap()[0]
            .to_f32_vec()
            .unwrap();
        let prefix = format!("{name} out0:");
        let line = text
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line in {text}"));
        let got: Vec<f32> = line[prefix.len()..]
            .split_whitespace()
            .map(|h| f32::from_bits(u32::from_str_radix(h, 16).unwrap()))
            .collect();
        assert_eq!(got.len(), expected.len());
        let worst = got
            .iter()
            .zip(&expected)
            .map(|(&a, &e)| (a as f64 - e as f64).abs() / (e.abs() as f64).max(1.0))
            .fold(0.0f64, f64::max);
        eprintln!("{name} in the Rust no_std example: worst error {worst:.2e}");
        assert!(worst <= BOARD_TOLERANCE, "{name}: {worst:e}");
    }
}

/// `--weights external`: the library holds no weights (its weights section keeps only the
/// kernels' small constant tables) and needs nothing; the app reads `<name>.weights` into RAM
/// and passes it to every run as `weights`: a null blob and one with another checksum field are
/// refused by the run, a corrupted one by `<name>_check_weights`, and the outputs match the
/// interpreter (DS-CNN on the M4F and M55 boards, mlp's 2.6 MB on the M4F's).
#[test]
fn external_weights_blob_runs_on_boards() {
    let tools = board_tools("external_weights_blob_runs_on_boards");
    for (name, boards) in [("ds_cnn", &BOARDS[..2]), ("mlp", &BOARDS[..1])] {
        let m = model(name);
        let mut opts = CompileOptions::default();
        opts.codegen.weights_blob = true;
        let art = compile_model(&m, &Target::resolve("cortex-m4f").unwrap(), &opts).unwrap();
        assert!(art.weights_object.is_none(), "{name}: a weights object");
        let blob = art.weights_blob.as_ref().unwrap();
        let section = format!(".rodata.xla_aot.{name}");
        let in_library: u64 = sections(&art.object)
            .unwrap()
            .iter()
            .filter(|s| s.name == section)
            .map(|s| s.size)
            .sum();
        eprintln!(
            "{name} --weights external: blob {} B, left in the library {in_library} B",
            blob.len()
        );
        assert!(
            in_library < 1024,
            "{name}: {in_library} bytes of constants left"
        );
        // The header and manifest state the `weights` argument and the blob.
        for decl in [
            format!("int {name}_run(const void *weights, void *arena, "),
            format!("int {name}_run_ptrs(const void *weights, void *arena, "),
            format!("int {name}_check_weights(const void *weights);"),
        ] {
            assert!(art.header.contains(&decl), "{name}: no `{decl}`");
        }
        let manifest: serde_json::Value = serde_json::from_str(&art.manifest).unwrap();
        let wb = &manifest["weights_blob"];
        assert_eq!(wb["bytes"].as_u64(), Some(blob.len() as u64), "{wb}");
        assert_eq!(wb["run_argument"], "weights");
        let sum = u64::from_le_bytes(blob[16..24].try_into().unwrap());
        assert_eq!(wb["checksum"], format!("0x{sum:016x}"));
        if !tools {
            continue;
        }
        let expected = evaluate(&m, &board_inputs(&m)).unwrap();
        for board in boards {
            let dir = scratch(&format!("mcu-ext-{name}-{}", board.machine));
            let elf = build_app(&m, board, Optimize::Size, true, &dir);
            let (outputs, text) = run_on_board(&elf, board);
            for want in [
                "null weights: -1",
                "wrong checksum field: -3",
                "corrupted weights: -3",
                "check_weights: 0",
            ] {
                assert!(
                    text.contains(want),
                    "{name} on {}: no `{want}` in\n{text}",
                    board.machine
                );
            }
            let e = expected[0].to_f32_vec().unwrap();
            let worst = worst_error(&outputs[0], &e);
            eprintln!(
                "{name} (external weights) on {}: worst error {worst:.2e}",
                board.machine
            );
            assert!(worst <= BOARD_TOLERANCE);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// The number a library header `#define`s as `<NAME>_<key>`.
fn header_define(header: &str, name: &str, key: &str) -> u64 {
    let p = format!("#define {}_{key} ", name.to_ascii_uppercase());
    let line = header
        .lines()
        .find(|l| l.starts_with(&p))
        .unwrap_or_else(|| panic!("no `{p}` in the header"));
    line[p.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Models of `scripts/onnx_quantized.py` (onnxruntime's quantizer: QDQ, uint8 activations, int8
/// weights per channel) run on the boards: a MobileNet block (a 3×3 convolution, a depthwise
/// and a pointwise one) and an MLP.
const INT8_MODELS: &[&str] = &["mobilenet_block_qdq_u8", "mlp_qdq_u8"];

/// The int8 models on the Cortex-M targets with the DSP extension (M4F, M7, M33): the integer
/// convolutions' and dense layers' products are `smlad`s on `sxtb16`-unpacked bytes
/// (`cpu/quad_dot.rs` `DotKind::Smlad`), and on the boards the outputs equal, bit for bit,
/// those of the host's int8 kernels (VNNI, `vpmaddwd`: every target sums the same integers
/// exactly and rounds once) and lie within the case's bound of onnxruntime. On the M55 the
/// products are Helium's `vmlava.s8` (`DotKind::Mve`), and its outputs agree bit for bit too.
/// Needs `XLA_AOT_ONNX_QUANT_DIR`
/// (`scripts/test.sh` sets it).
#[test]
fn int8_models_run_on_smlad_and_equal_the_host_bit_for_bit() {
    let Some(root) = std::env::var_os("XLA_AOT_ONNX_QUANT_DIR") else {
        eprintln!(
            "SKIP int8_models_run_on_smlad_and_equal_the_host_bit_for_bit: \
             XLA_AOT_ONNX_QUANT_DIR is not set (scripts/test.sh sets it)"
        );
        return;
    };
    let tools = board_tools("int8_models_run_on_smlad_and_equal_the_host_bit_for_bit");
    for name in INT8_MODELS {
        let dir = Path::new(&root).join(name);
        let path = dir.join(format!("{name}.onnx"));
        let bytes = std::fs::read(&path).unwrap();
        let m = xla_aot::front::onnx::import_file_with(
            &path,
            &bytes,
            name,
            &xla_aot::front::onnx::ImportOptions::default(),
        )
        .unwrap();
        let opts = CompileOptions {
            codegen: Options {
                assembly: true,
                ..Options::default()
            },
            ..CompileOptions::default()
        };
        for target in ["cortex-m4f", "cortex-m7", "cortex-m33"] {
            let asm = compile_model(&m, &Target::resolve(target).unwrap(), &opts)
                .unwrap()
                .assembly
                .unwrap();
            let count = |op: &str| asm.lines().filter(|l| l.contains(op)).count();
            let (smlad, sxtb16) = (count("\tsmlad\t"), count("\tsxtb16\t"));
            eprintln!("{name} on {target}: {smlad} smlad, {sxtb16} sxtb16");
            assert!(
                smlad >= 2 && sxtb16 >= 2,
                "{name} on {target}: the int8 products are not on smlad"
            );
        }
        // Helium: 16 byte products per `vmlava.s8` into a core register (`quad_dot.rs`).
        let asm = compile_model(&m, &Target::resolve("cortex-m55").unwrap(), &opts)
            .unwrap()
            .assembly
            .unwrap();
        let vmlava = asm.lines().filter(|l| l.contains("\tvmlava.s8\t")).count();
        eprintln!("{name} on cortex-m55: {vmlava} vmlava.s8");
        assert!(
            vmlava >= 4,
            "{name} on cortex-m55: the int8 products are not on vmlava"
        );
        if !tools {
            continue;
        }
        let inputs = board_inputs(&m);
        let host = common::compiled_targets().remove(0);
        let want = common::run_compiled(&m, &host, &inputs, &format!("mcu-{name}-host"))[0]
            .to_f32_vec()
            .unwrap();
        let scratch_dir = scratch(&format!("mcu-{name}"));
        for board in BOARDS {
            let elf = build_app(&m, board, Optimize::Size, false, &scratch_dir);
            let (outputs, _) = run_on_board(&elf, board);
            let got = &outputs[0];
            assert_eq!(got.len(), want.len());
            let same = common::same_bits(got, &want);
            eprintln!(
                "{name} on {} ({}): {same} of {} outputs have {}'s bits",
                board.machine,
                board.target,
                want.len(),
                host.name
            );
            assert_eq!(same, want.len(), "{name} on {} differs", board.machine);
        }
        let _ = std::fs::remove_dir_all(&scratch_dir);
    }
}
