/* The raw NCCL path's issue loop: a trial's prepared C calls, made back to back from C.
 *
 * Why: `sweep --path nccl` exists to time what nccl-tests times, NCCL called back to back from
 * compiled code. A Python loop of ctypes calls adds about 0.6 us of host time to every call on
 * the GPU machines, which at one rank was the whole difference from nccl-tests (docs/LOG.md,
 * 2026-12-06). This module is optional: setup.py builds it where a C compiler and Python's
 * headers exist, and `ncclprobe.probes.issue_loop` falls back to the ctypes loop where it is
 * absent.
 *
 *     run(records, count) -> the number of calls that returned 0
 *
 * `records` is a writable buffer of `count` records of WORDS 64-bit words each: the function's
 * address, its 8 argument words and a result word. The calls are made in order; the first one
 * that returns non-zero stops the loop, its result is stored (sign-extended) in its record's
 * result word, and its index is returned. The GIL is released while the loop runs.
 *
 * Why one prototype, `int f(uint64_t x 8)`, is sound for NCCL's functions here. They take only
 * pointers, size_t, int and int-sized enums (ncclDataType_t, ncclRedOp_t), at most 8 of them,
 * and return an int-sized enum (ncclResult_t; cudaEventRecord's cudaError_t alike); none is
 * variadic. The calling conventions this file builds for pass such arguments in integer
 * registers, one 64-bit slot each, and the callee reads only the parameters it declares:
 *   - x86-64 System V: the first 6 in rdi, rsi, rdx, rcx, r8, r9, the 7th and 8th in 8-byte
 *     stack slots that the caller allocates and releases, so a callee of fewer parameters
 *     leaves them alone. An int parameter is the low 32 bits of its register or slot (little
 *     endian), and the ABI leaves the upper 32 bits to the callee to ignore: a negative int
 *     passed as its 64-bit two's complement arrives intact.
 *   - AArch64 AAPCS64 (Linux; Apple's variant too): all 8 in x0-x7, nothing on the stack; an
 *     int parameter is read from the low 32 bits (w register).
 * The int result is eax / w0 under both. ISO C calls a call through a function pointer of
 * another type undefined; what makes it hold is that the callee lives in another shared
 * library, so the compiler can only emit the ABI's call sequence for the prototype below. That
 * is what the old machine-code loop did by hand, and what ctypes' callbacks in the tests
 * exercise. Elsewhere (32-bit targets, Windows x64's 4 register arguments, POWER's parameter
 * save area) nothing here is argued, so the module refuses to import and the ctypes loop
 * issues the calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#if (defined(__x86_64__) && !defined(_WIN32)) || defined(__aarch64__)
#define ISSUE_LOOP_ABI 1
#endif

enum { WORDS = 10, ARGS = 8 }; /* the function, its 8 argument words, the result word */

typedef int (*call8)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                     uint64_t);

static Py_ssize_t issue(uint64_t *record, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count; i++, record += WORDS) {
        call8 fn = (call8)(uintptr_t)record[0];
        int result = fn(record[1], record[2], record[3], record[4], record[5], record[6],
                        record[7], record[8]);
        if (result != 0) {
            record[WORDS - 1] = (uint64_t)(int64_t)result;
            return i;
        }
    }
    return count;
}

static PyObject *run(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t count, done;
    (void)module;
    if (!PyArg_ParseTuple(args, "w*n:run", &view, &count))
        return NULL;
    if (count < 0 || view.len / (Py_ssize_t)(WORDS * sizeof(uint64_t)) < count ||
        (uintptr_t)view.buf % sizeof(uint64_t) != 0) {
        PyErr_Format(PyExc_ValueError,
                     "run: %zd records of %d bytes do not fit an aligned buffer of %zd bytes",
                     count, (int)(WORDS * sizeof(uint64_t)), view.len);
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    done = issue((uint64_t *)view.buf, count);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(done);
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS,
     "run(records, count) -> calls that returned 0: each record is (function, 8 argument "
     "words, result word); the first failing call's result is stored in its result word."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_issue_loop", "The raw NCCL path's issue loop in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__issue_loop(void) {
#ifndef ISSUE_LOOP_ABI
    PyErr_SetString(PyExc_ImportError,
                    "the C issue loop is argued for x86-64 System V and AArch64 only "
                    "(probes/_issue_loop.c)");
    return NULL;
#else
    PyObject *made = PyModule_Create(&module);
    if (made != NULL && (PyModule_AddIntConstant(made, "WORDS", WORDS) < 0 ||
                         PyModule_AddIntConstant(made, "ARGS", ARGS) < 0)) {
        Py_DECREF(made);
        return NULL;
    }
    return made;
#endif
}
