/*
 * qemu_insn_count: a TCG plugin for QEMU 7.2 (plugin API version 1) that counts the guest
 * instructions a run executes, exactly and deterministically, for `bench/arm.sh`.
 *
 * Contract:
 *   - Every translation block (TB) gets one inline 64-bit add of its instruction count onto a
 *     global counter at the block's start (QEMU_PLUGIN_INLINE_ADD_U64), so the total is the sum
 *     over executed blocks of their length. A block left early by an exception (a fault, a
 *     semihosting BKPT in the middle of a block) still counts whole; that happens the same way in
 *     every run, so the figure is deterministic, and `bench/arm.sh` takes differences of two runs.
 *   - With `tbs=FILE`, every distinct block (start address, instruction count) also gets an inline
 *     add of 1 onto its own execution counter, and at exit FILE receives one line per block:
 *     `<start pc hex> <insns> <executions>`, for attributing instructions to symbols (`nm`).
 *   - At exit the total is written as `insns <N>` to `out=FILE` if given, else through
 *     qemu_plugin_outs (shown with `-d plugin`, into `-D LOGFILE` if given).
 *   - Meant for one vCPU (the MPS boards, a single-threaded qemu-aarch64 program): the counters are
 *     plain inline adds, which are not atomic across vCPU threads. Block registration is locked.
 *
 * Build: scripts/build_qemu_plugin.sh (needs QEMU 7.2's include/qemu/qemu-plugin.h; the script
 * gets it from $QEMU_SRC or Debian's qemu source package). Use:
 *   qemu-system-arm -M mps2-an386 ... -plugin target/qemu-plugin/libqemu_insn_count.so,out=a.txt,tbs=b.txt
 *   qemu-aarch64 -plugin target/qemu-plugin/libqemu_insn_count.so,out=a.txt ./prog
 * (QEMU 7.2 passes the `name=value` pairs after the library path to the plugin as its argv.)
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

/* Initial slots of the block table (a power of two); it doubles at half full. A Cortex-M model
 * run translates a few thousand distinct blocks, a glibc-linked aarch64 program some tens of
 * thousands. */
#define TB_TABLE_INITIAL 4096

struct tb_entry {
    uint64_t pc;
    uint64_t insns;
    uint64_t execs; /* target of the block's inline add; never moves once allocated */
};

static uint64_t total_insns;
static char *out_path;
static char *tbs_path;

/* Open-addressed table of pointers to entries, keyed by (pc, insns): QEMU may translate one start
 * address into blocks of different lengths (a page boundary, a retranslation), and those are
 * kept apart so insns × execs stays exact. Entries are allocated once and never freed before exit,
 * since the generated code holds their addresses. */
static struct tb_entry **table;
static size_t table_slots;
static size_t table_used;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t slot_of(uint64_t pc, uint64_t insns, size_t slots) {
    uint64_t h = (pc ^ (insns << 48)) * 0x9E3779B97F4A7C15ull; /* Fibonacci hashing */
    return (size_t)(h >> 20) & (slots - 1);
}

static void table_grow(void) {
    size_t slots = table_slots ? table_slots * 2 : TB_TABLE_INITIAL;
    struct tb_entry **t = calloc(slots, sizeof *t);
    if (!t) {
        fprintf(stderr, "qemu_insn_count: out of memory\n");
        abort();
    }
    for (size_t i = 0; i < table_slots; i++) {
        struct tb_entry *e = table[i];
        if (!e) continue;
        size_t s = slot_of(e->pc, e->insns, slots);
        while (t[s]) s = (s + 1) & (slots - 1);
        t[s] = e;
    }
    free(table);
    table = t;
    table_slots = slots;
}

/* The entry of block (pc, insns), created on first sight. Caller holds table_lock. */
static struct tb_entry *entry_for(uint64_t pc, uint64_t insns) {
    if (2 * (table_used + 1) > table_slots) table_grow();
    size_t s = slot_of(pc, insns, table_slots);
    while (table[s]) {
        if (table[s]->pc == pc && table[s]->insns == insns) return table[s];
        s = (s + 1) & (table_slots - 1);
    }
    struct tb_entry *e = calloc(1, sizeof *e);
    if (!e) {
        fprintf(stderr, "qemu_insn_count: out of memory\n");
        abort();
    }
    e->pc = pc;
    e->insns = insns;
    table[s] = e;
    table_used++;
    return e;
}

static void on_tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    uint64_t n = qemu_plugin_tb_n_insns(tb);
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &total_insns, n);
    if (!tbs_path) return;
    pthread_mutex_lock(&table_lock);
    struct tb_entry *e = entry_for(qemu_plugin_tb_vaddr(tb), n);
    pthread_mutex_unlock(&table_lock);
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &e->execs, 1);
}

static void report_at_exit(qemu_plugin_id_t id, void *userdata) {
    (void)id;
    (void)userdata;
    char line[64];
    snprintf(line, sizeof line, "insns %" PRIu64 "\n", total_insns);
    if (out_path) {
        FILE *f = fopen(out_path, "w");
        if (f) {
            fputs(line, f);
            fclose(f);
        } else {
            fprintf(stderr, "qemu_insn_count: cannot write %s\n", out_path);
        }
    } else {
        qemu_plugin_outs(line);
    }
    if (tbs_path) {
        FILE *f = fopen(tbs_path, "w");
        if (!f) {
            fprintf(stderr, "qemu_insn_count: cannot write %s\n", tbs_path);
            return;
        }
        for (size_t i = 0; i < table_slots; i++) {
            struct tb_entry *e = table[i];
            if (e && e->execs)
                fprintf(f, "%" PRIx64 " %" PRIu64 " %" PRIu64 "\n", e->pc, e->insns, e->execs);
        }
        fclose(f);
    }
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                                           char **argv) {
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "out=", 4) == 0) {
            out_path = strdup(argv[i] + 4);
        } else if (strncmp(argv[i], "tbs=", 4) == 0) {
            tbs_path = strdup(argv[i] + 4);
        } else {
            fprintf(stderr, "qemu_insn_count: unknown argument '%s' (out=FILE, tbs=FILE)\n",
                    argv[i]);
            return -1;
        }
    }
    if (tbs_path) table_grow();
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_tb_trans);
    qemu_plugin_register_atexit_cb(id, report_at_exit, NULL);
    return 0;
}
