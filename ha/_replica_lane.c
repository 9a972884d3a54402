/* ha._replica_lane: the slave's end of a replication link in C, for the common frame (stage 1
 * of docs/native-lane.md).
 *
 * `apply_frames` takes the bytes a slave's link has received and, for each whole DATA frame
 * that continues this log where it ends (its MAC right, its epoch the log's last one, its
 * records whole and inside the active segment), appends the records to the segment's file
 * and counts the frame. It declines, at the first frame that is anything else (another kind,
 * a failed MAC, a new epoch, an offset that is not the log's end, records that cross the
 * segment, bytes that are not whole records), and leaves that frame unread: the Python path
 * (ha/slave.py's `_take_frame`) reads it and gives the precise answer. So the lane decides
 * nothing the Python path would decide differently; its twin is
 * ha/replica_lane.py's `apply_frames_in_python`, which tests/ha/test_replica_lane.py and the
 * fuzz target `replica_frames` check it against.
 *
 * `Gmac` is the link's frame MAC (ha/link_auth.py: AES-256-GCM over the payload as associated
 * data, nothing encrypted), computed by OpenSSL's libcrypto: never our own cryptography.
 * libcrypto is opened at import (dlopen of libcrypto.so.3, the library Python's own ssl and
 * hashlib modules run on) and its few EVP functions are declared here, so that the build
 * needs no OpenSSL headers; where it cannot be opened, the import fails and ha/link_auth.py
 * and ha/replica_lane.py fall back to their Python twins.
 *
 * Thread-safety: `apply_frames` releases the GIL while it verifies and writes; a `Gmac` must
 * be used by one thread at a time (a link's MACs belong to its event loop).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "../ferrymq/codec/_record_layout.h"
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- libcrypto, opened at import ---------------------------------------------------- */

typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;
typedef struct evp_cipher_st EVP_CIPHER;
typedef struct engine_st ENGINE;

#define EVP_CTRL_GCM_GET_TAG 0x10 /* openssl/evp.h */

static struct {
    EVP_CIPHER_CTX *(*ctx_new)(void);
    void (*ctx_free)(EVP_CIPHER_CTX *);
    const EVP_CIPHER *(*aes_128_gcm)(void);
    const EVP_CIPHER *(*aes_192_gcm)(void);
    const EVP_CIPHER *(*aes_256_gcm)(void);
    int (*encrypt_init)(EVP_CIPHER_CTX *, const EVP_CIPHER *, ENGINE *, const unsigned char *,
                        const unsigned char *);
    int (*encrypt_update)(EVP_CIPHER_CTX *, unsigned char *, int *, const unsigned char *, int);
    int (*encrypt_final)(EVP_CIPHER_CTX *, unsigned char *, int *);
    int (*ctx_ctrl)(EVP_CIPHER_CTX *, int, int, void *);
} evp;

static int
open_libcrypto(void)
{
    void *library = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        PyErr_Format(PyExc_ImportError, "libcrypto.so.3 cannot be opened: %s", dlerror());
        return -1;
    }
    struct {
        void **slot;
        const char *name;
    } symbols[] = {
        {(void **)&evp.ctx_new, "EVP_CIPHER_CTX_new"},
        {(void **)&evp.ctx_free, "EVP_CIPHER_CTX_free"},
        {(void **)&evp.aes_128_gcm, "EVP_aes_128_gcm"},
        {(void **)&evp.aes_192_gcm, "EVP_aes_192_gcm"},
        {(void **)&evp.aes_256_gcm, "EVP_aes_256_gcm"},
        {(void **)&evp.encrypt_init, "EVP_EncryptInit_ex"},
        {(void **)&evp.encrypt_update, "EVP_EncryptUpdate"},
        {(void **)&evp.encrypt_final, "EVP_EncryptFinal_ex"},
        {(void **)&evp.ctx_ctrl, "EVP_CIPHER_CTX_ctrl"},
    };
    for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
        *symbols[i].slot = dlsym(library, symbols[i].name);
        if (*symbols[i].slot == NULL) {
            PyErr_Format(PyExc_ImportError, "libcrypto.so.3 has no %s", symbols[i].name);
            return -1;
        }
    }
    return 0;
}

/* ---- the frame MAC (ha/link_auth.py's FrameMac) -------------------------------------- */

#define MAC_BYTES 16   /* ha.link_auth.MAC_BYTES */
#define LINKS_MAX 16   /* the links one append_and_push sends to (ha.master.NATIVE_LINKS_MAX) */
#define NONCE_BYTES 12 /* ha.link_auth._NONCE: direction, kind, 0, 0, count (big-endian) */

typedef struct {
    PyObject_HEAD
    EVP_CIPHER_CTX *context; /* the key's schedule, set once */
    unsigned char direction;
} Gmac;

static void
gmac_dealloc(Gmac *self)
{
    if (self->context != NULL)
        evp.ctx_free(self->context);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
gmac_init(Gmac *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"key", "direction", NULL};
    Py_buffer key;
    int direction;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*i", keywords, &key, &direction))
        return -1;
    /* AES-128, -192 or -256 by the key's length, as cryptography's AESGCM (links use 256) */
    const EVP_CIPHER *cipher = key.len == 16   ? evp.aes_128_gcm()
                               : key.len == 24 ? evp.aes_192_gcm()
                               : key.len == 32 ? evp.aes_256_gcm()
                                               : NULL;
    int ok = cipher != NULL && direction >= 0 && direction <= 255;
    if (ok && self->context == NULL)
        ok = (self->context = evp.ctx_new()) != NULL;
    if (ok)
        ok = evp.encrypt_init(self->context, cipher, NULL, key.buf, NULL) == 1;
    PyBuffer_Release(&key);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError,
                        "a Gmac takes a key of 16, 24 or 32 bytes and a direction byte");
        return -1;
    }
    self->direction = (unsigned char)direction;
    return 0;
}

/* The tag of a frame of `kind`, number `sequence`, over its payload given in two parts
 * (`head`, possibly empty, then `body`): the same tag as over their join. 1, or 0 when
 * libcrypto failed (nothing it is given here can make it fail). Runs without the GIL. */
static int
gmac_tag_parts(Gmac *self, int kind, uint64_t sequence, const unsigned char *head,
               size_t head_length, const unsigned char *body, size_t body_length,
               unsigned char tag[MAC_BYTES])
{
    unsigned char nonce[NONCE_BYTES] = {self->direction, (unsigned char)kind, 0, 0};
    for (int i = 0; i < 8; i++)
        nonce[4 + i] = (unsigned char)(sequence >> (56 - 8 * i));
    int written;
    if (evp.encrypt_init(self->context, NULL, NULL, NULL, nonce) != 1)
        return 0;
    if (head_length > 0 &&
        evp.encrypt_update(self->context, NULL, &written, head, (int)head_length) != 1)
        return 0;
    while (body_length > 0) {
        int part = body_length > (1u << 30) ? (1 << 30) : (int)body_length;
        if (evp.encrypt_update(self->context, NULL, &written, body, part) != 1)
            return 0;
        body += part;
        body_length -= (size_t)part;
    }
    unsigned char nothing[16];
    return evp.encrypt_final(self->context, nothing, &written) == 1 &&
           evp.ctx_ctrl(self->context, EVP_CTRL_GCM_GET_TAG, MAC_BYTES, tag) == 1;
}

/* gmac_tag_parts over one payload. */
static int
gmac_tag(Gmac *self, int kind, uint64_t sequence, const unsigned char *payload, size_t length,
         unsigned char tag[MAC_BYTES])
{
    return gmac_tag_parts(self, kind, sequence, NULL, 0, payload, length, tag);
}

static int
tags_equal(const unsigned char *a, const unsigned char *b)
{
    unsigned char difference = 0;
    for (int i = 0; i < MAC_BYTES; i++)
        difference |= a[i] ^ b[i];
    return difference == 0;
}

static int
parse_sequence(PyObject *value, uint64_t *sequence)
{
    unsigned long long parsed = PyLong_AsUnsignedLongLong(value);
    if (parsed == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *sequence = parsed;
    return 0;
}

PyDoc_STRVAR(gmac_seal_doc, "seal(kind, sequence, payload) -> bytes\n\n"
                            "The 16-byte tag of frame number `sequence`, of `kind`, over `payload`: "
                            "what ha.link_auth.FrameMac.seal computes with cryptography's AESGCM.");

static PyObject *
gmac_seal(Gmac *self, PyObject *args)
{
    int kind;
    PyObject *sequence_object;
    Py_buffer payload;
    uint64_t sequence;
    if (!PyArg_ParseTuple(args, "iOy*", &kind, &sequence_object, &payload))
        return NULL;
    unsigned char tag[MAC_BYTES];
    int ok = 0;
    if (parse_sequence(sequence_object, &sequence) == 0)
        ok = gmac_tag(self, kind, sequence, payload.buf, (size_t)payload.len, tag);
    PyBuffer_Release(&payload);
    if (PyErr_Occurred())
        return NULL;
    if (!ok)
        return PyErr_Format(PyExc_RuntimeError, "libcrypto failed to compute a GMAC");
    return PyBytes_FromStringAndSize((const char *)tag, MAC_BYTES);
}

PyDoc_STRVAR(gmac_verify_doc,
             "verify(kind, sequence, payload, tag) -> bool\n\n"
             "Whether `tag` is seal(kind, sequence, payload) (compared in constant time).");

static PyObject *
gmac_verify(Gmac *self, PyObject *args)
{
    int kind;
    PyObject *sequence_object;
    Py_buffer payload, tag;
    uint64_t sequence;
    if (!PyArg_ParseTuple(args, "iOy*y*", &kind, &sequence_object, &payload, &tag))
        return NULL;
    unsigned char expected[MAC_BYTES];
    int ok = 0, equal = 0;
    if (parse_sequence(sequence_object, &sequence) == 0) {
        ok = gmac_tag(self, kind, sequence, payload.buf, (size_t)payload.len, expected);
        equal = ok && tag.len == MAC_BYTES && tags_equal(expected, tag.buf);
    }
    PyBuffer_Release(&payload);
    PyBuffer_Release(&tag);
    if (PyErr_Occurred())
        return NULL;
    if (!ok)
        return PyErr_Format(PyExc_RuntimeError, "libcrypto failed to compute a GMAC");
    return PyBool_FromLong(equal);
}

static PyMethodDef gmac_methods[] = {
    {"seal", (PyCFunction)gmac_seal, METH_VARARGS, gmac_seal_doc},
    {"verify", (PyCFunction)gmac_verify, METH_VARARGS, gmac_verify_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject GmacType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ha._replica_lane.Gmac",
    .tp_basicsize = sizeof(Gmac),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("Gmac(key, direction): one direction's frame MAC of a replication link "
                        "(ha/link_auth.py), its AES key schedule set once; ha.link_auth.AesGcmMac "
                        "is its twin."),
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)gmac_init,
    .tp_dealloc = (destructor)gmac_dealloc,
    .tp_methods = gmac_methods,
};

/* ---- the DATA frames (ha/wire.py) ------------------------------------------------------ */

#define FRAME_HEADER_SIZE 5      /* kind 1, length 4 (big-endian) */
#define DATA_HEADER_SIZE 32      /* offset, epoch, epoch start, confirmed offset: 8 each */
#define KIND_DATA 6              /* ha.wire.Kind.DATA */
#define MAX_FRAME_BYTES (64 << 20) /* ha.wire.MAX_FRAME_BYTES */

/* Why `apply_frames` stopped (ha.replica_lane.Stop). */
enum { STOP_MORE = 0, STOP_DECLINED = 1, STOP_WRITE_FAILED = 2 };

PyDoc_STRVAR(apply_frames_doc,
"apply_frames(gmac, sequence, unread, fd, position, room, write_offset, epoch)\n"
"    -> (stop, used, sequence, write_offset, confirmed, appended, heartbeats, errno)\n\n"
"Append the records of the whole DATA frames at the start of `unread` that continue the log\n"
"(ending at `write_offset`, at `position` of the active segment's file `fd`, with `room`\n"
"bytes left in it, its last epoch `epoch`), checking each frame's MAC (`gmac`, frame number\n"
"`sequence` next). Stops at the first frame not whole yet (stop 0), at one it declines\n"
"(stop 1: left unread for the Python path) or at a write that failed (stop 2, with the\n"
"errno; the part written is zeroed again). `used`: the bytes of the frames taken;\n"
"`confirmed`: the greatest confirmed offset they carried, -1 without any; `appended`,\n"
"`heartbeats`: how many frames of each kind. ha.replica_lane.apply_frames_in_python is\n"
"its twin.");

/* One log's end as the lane continues it, and what a run of `apply_run` took: the
 * arguments and results of `apply_frames`, kept between calls by a `Follower`. */
typedef struct {
    Gmac *gmac;              /* the incoming frames' MAC */
    uint64_t sequence;       /* the next incoming frame's number */
    int fd;                  /* the active segment's file */
    long long position, room, write_offset, epoch;
    long long confirmed;     /* the greatest confirmed offset the frames carried, -1: none */
    long long appended, heartbeats;
    int stop, error_number, mac_failed;
} LogEnd;

/* Take the whole DATA frames at the start of bytes[0:length) that continue the log, as
 * `apply_frames` documents; the bytes used. Runs without the GIL, touches no Python object
 * but the Gmac's libcrypto context. */
static size_t
apply_run(LogEnd *end, const unsigned char *bytes, size_t length)
{
    size_t used = 0;
    end->stop = STOP_MORE;
    while (length - used >= FRAME_HEADER_SIZE) {
        const unsigned char *frame = bytes + used;
        uint32_t body = ((uint32_t)frame[1] << 24) | ((uint32_t)frame[2] << 16) |
                        ((uint32_t)frame[3] << 8) | frame[4];
        if (frame[0] != KIND_DATA || body > MAX_FRAME_BYTES ||
            body < DATA_HEADER_SIZE + MAC_BYTES) {
            end->stop = STOP_DECLINED;
            break;
        }
        if (length - used - FRAME_HEADER_SIZE < body)
            break; /* not whole yet */
        const unsigned char *payload = frame + FRAME_HEADER_SIZE;
        size_t payload_length = body - MAC_BYTES;
        unsigned char tag[MAC_BYTES];
        if (!gmac_tag(end->gmac, KIND_DATA, end->sequence, payload, payload_length, tag)) {
            end->mac_failed = 1;
            break;
        }
        if (!tags_equal(tag, payload + payload_length)) {
            end->stop = STOP_DECLINED;
            break;
        }
        int64_t offset = read_int64(payload), frame_epoch = read_int64(payload + 8);
        int64_t frame_confirmed = read_int64(payload + 24);
        const unsigned char *records = payload + DATA_HEADER_SIZE;
        size_t records_length = payload_length - DATA_HEADER_SIZE;
        if (records_length > 0) {
            if (frame_epoch != end->epoch || offset != end->write_offset ||
                records_length > (unsigned long long)end->room ||
                !records_are_whole(records, records_length)) {
                end->stop = STOP_DECLINED;
                break;
            }
            size_t written = 0;
            while (written < records_length) {
                ssize_t n = pwrite(end->fd, records + written, records_length - written,
                                   (off_t)(end->position + (long long)written));
                if (n < 0 && errno == EINTR)
                    continue;
                if (n <= 0) {
                    end->error_number = n < 0 ? errno : EIO;
                    break;
                }
                written += (size_t)n;
            }
            if (end->error_number != 0) {
                /* Nothing of a refused append may stay past the log's end (MappedFile.append_at) */
                static const unsigned char zeros[4096];
                for (size_t zeroed = 0; zeroed < written;) {
                    size_t part = written - zeroed < sizeof(zeros) ? written - zeroed : sizeof(zeros);
                    ssize_t n = pwrite(end->fd, zeros, part,
                                       (off_t)(end->position + (long long)zeroed));
                    if (n <= 0 && errno != EINTR)
                        break;
                    if (n > 0)
                        zeroed += (size_t)n;
                }
                end->stop = STOP_WRITE_FAILED;
                break;
            }
            end->position += (long long)records_length;
            end->room -= (long long)records_length;
            end->write_offset += (long long)records_length;
            end->appended++;
        } else {
            end->heartbeats++;
        }
        if (frame_confirmed > end->confirmed)
            end->confirmed = frame_confirmed;
        end->sequence++;
        used += FRAME_HEADER_SIZE + body;
    }
    return used;
}

static PyObject *
apply_frames(PyObject *Py_UNUSED(module), PyObject *args)
{
    LogEnd end = {.confirmed = -1};
    PyObject *sequence_object;
    Py_buffer unread;
    if (!PyArg_ParseTuple(args, "O!Oy*iLLLL", &GmacType, &end.gmac, &sequence_object, &unread,
                          &end.fd, &end.position, &end.room, &end.write_offset, &end.epoch))
        return NULL;
    if (parse_sequence(sequence_object, &end.sequence) < 0 || end.position < 0 || end.room < 0) {
        PyBuffer_Release(&unread);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "a negative position or room");
        return NULL;
    }
    size_t used;
    Py_BEGIN_ALLOW_THREADS
    used = apply_run(&end, unread.buf, (size_t)unread.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&unread);
    if (end.mac_failed)
        return PyErr_Format(PyExc_RuntimeError, "libcrypto failed to compute a GMAC");
    return Py_BuildValue("(inKLLLLi)", end.stop, (Py_ssize_t)used,
                         (unsigned long long)end.sequence, end.write_offset, end.confirmed,
                         end.appended, end.heartbeats, end.error_number);
}

/* ---- the master's end: a run appended and its DATA frames written (stage 3) ------------
 *
 * `append_and_push` is the master's append of one batch and the DATA frame that carries it
 * to each streaming slave, in one call: the records laid out by the store's own encoder
 * (store._speedups.encode_batch, passed in), written at the log's end with pwrite, then the
 * frame (the DATA header, the records, the tag) sealed and sent on each link's socket. Its
 * twin is what the Python path does for the same batch: CommitLog.append's encode and
 * MappedFile.append_at, then ReplicationMaster._push's data_payload, data_frame_parts and
 * write_frame_parts for each link (tests/ha/test_master_lane.py compares the two byte for
 * byte). It decides nothing: ha/master.py's `log_writer` hands it only links that are
 * streaming, sent up to the log's end and with nothing buffered, and the store calls it only
 * for a batch that fits the active segment. A frame the socket does not take whole is left
 * to the caller, who writes the rest through the link's transport; a write to the log that
 * fails is zeroed again and sends nothing. */

#define DATA_FRAME_OVERHEAD (FRAME_HEADER_SIZE + DATA_HEADER_SIZE + MAC_BYTES)

static void
put_int64(unsigned char *p, uint64_t value)
{
    for (int i = 7; i >= 0; i--, value >>= 8)
        p[i] = (unsigned char)value;
}

/* Write all of bytes[0:length) at `position` of `fd`: 0, or the errno that stopped it, the
 * part written zeroed again (MappedFile.append_at's rule: nothing of a refused append stays
 * past the log's end). */
static int
write_at(int fd, const unsigned char *bytes, size_t length, long long position)
{
    size_t written = 0;
    int error_number = 0;
    while (written < length) {
        ssize_t n = pwrite(fd, bytes + written, length - written, (off_t)(position + (long long)written));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            error_number = n < 0 ? errno : EIO;
            break;
        }
        written += (size_t)n;
    }
    if (error_number != 0) {
        static const unsigned char zeros[4096];
        for (size_t zeroed = 0; zeroed < written;) {
            size_t part = written - zeroed < sizeof(zeros) ? written - zeroed : sizeof(zeros);
            ssize_t n = pwrite(fd, zeros, part, (off_t)(position + (long long)zeroed));
            if (n <= 0 && errno != EINTR)
                break;
            if (n > 0)
                zeroed += (size_t)n;
        }
    }
    return error_number;
}

/* Send as much of the frame (its head, payload header, records, tag) as the non-blocking
 * socket takes now: the bytes sent, 0 after any error (the caller's transport then writes
 * the frame and meets the error the usual way). */
static size_t
send_frame(int socket_fd, const unsigned char *head, const unsigned char *payload_header,
           const unsigned char *records, size_t records_length, const unsigned char *tag)
{
    struct iovec parts[4] = {
        {(void *)head, FRAME_HEADER_SIZE},
        {(void *)payload_header, DATA_HEADER_SIZE},
        {(void *)records, records_length},
        {(void *)tag, MAC_BYTES},
    };
    struct msghdr message = {.msg_iov = parts, .msg_iovlen = 4};
    ssize_t n;
    do
        n = sendmsg(socket_fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    return n > 0 ? (size_t)n : 0;
}

PyDoc_STRVAR(append_and_push_doc,
"append_and_push(encode_batch, batch, position, store_timestamp_ms, store_host,\n"
"    queue_offsets, appended_type, run_type, fd, file_position, links, epoch, epoch_start,\n"
"    confirmed, chunk_limit) -> (errno, data, appended, sent, tags)\n\n"
"`batch` laid out by `encode_batch` (store._speedups.encode_batch, with the arguments\n"
"CommitLog.append gives it) at log offset `position`, written at `file_position` of the\n"
"active segment's file `fd`, then a DATA frame of its records (offset `position`, `epoch`,\n"
"`epoch_start`, `confirmed`) sealed with each link's Gmac as frame number `sequence` and sent\n"
"on its socket (`links`: (socket_fd, gmac, sequence) each). errno 0: written; `data` and\n"
"`appended` as encode_batch gives them, `sent[i]` the bytes of link i's frame its socket\n"
"took (of len(data) + 53) and `tags[i]` its tag; else the write failed with that errno,\n"
"nothing of it stays and nothing was sent (data and appended None). Records over\n"
"`chunk_limit` bytes are written and sent on no link (`sent` empty).");

static PyObject *
append_and_push(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *encode, *batch, *store_host, *queue_offsets, *appended_type, *run_type, *links;
    long long position, store_timestamp_ms, file_position, epoch, epoch_start, confirmed;
    long long chunk_limit;
    int fd;
    if (!PyArg_ParseTuple(args, "OO!LLO!O!OOiLO!LLLL:append_and_push", &encode, &PyList_Type,
                          &batch, &position, &store_timestamp_ms, &PyBytes_Type, &store_host,
                          &PyDict_Type, &queue_offsets, &appended_type, &run_type, &fd,
                          &file_position, &PyTuple_Type, &links, &epoch, &epoch_start,
                          &confirmed, &chunk_limit))
        return NULL;
    Py_ssize_t link_count = PyTuple_GET_SIZE(links);
    if (link_count > LINKS_MAX || position < 0 || file_position < 0) {
        PyErr_Format(PyExc_ValueError, "at most %d links, and no negative position", LINKS_MAX);
        return NULL;
    }
    int socket_fds[LINKS_MAX];
    Gmac *gmacs[LINKS_MAX];
    uint64_t sequences[LINKS_MAX];
    for (Py_ssize_t i = 0; i < link_count; i++) {
        PyObject *link = PyTuple_GET_ITEM(links, i);
        PyObject *sequence_object;
        if (!PyArg_ParseTuple(link, "iO!O:a link", &socket_fds[i], &GmacType, &gmacs[i],
                              &sequence_object) ||
            parse_sequence(sequence_object, &sequences[i]) < 0)
            return NULL;
    }
    PyObject *encoded = PyObject_CallFunction(encode, "OLLOOOO", batch, position,
                                              store_timestamp_ms, store_host, queue_offsets,
                                              appended_type, run_type);
    if (encoded == NULL)
        return NULL;
    PyObject *data, *appended;
    if (!PyArg_ParseTuple(encoded, "O!O!:encoded", &PyBytes_Type, &data, &PyList_Type,
                          &appended)) {
        Py_DECREF(encoded);
        return NULL;
    }
    const unsigned char *records = (const unsigned char *)PyBytes_AS_STRING(data);
    size_t length = (size_t)PyBytes_GET_SIZE(data);
    if ((long long)length > chunk_limit || length + DATA_HEADER_SIZE + MAC_BYTES > MAX_FRAME_BYTES)
        link_count = 0; /* more than one frame's chunk: _push sends it in chunks */
    /* The tags first: what can fail here fails before anything is written or sent. */
    unsigned char head[FRAME_HEADER_SIZE], payload_header[DATA_HEADER_SIZE];
    unsigned char tags_made[LINKS_MAX][MAC_BYTES];
    uint32_t body = (uint32_t)(DATA_HEADER_SIZE + length + MAC_BYTES);
    head[0] = KIND_DATA;
    head[1] = (unsigned char)(body >> 24);
    head[2] = (unsigned char)(body >> 16);
    head[3] = (unsigned char)(body >> 8);
    head[4] = (unsigned char)body;
    put_int64(payload_header, (uint64_t)position);
    put_int64(payload_header + 8, (uint64_t)epoch);
    put_int64(payload_header + 16, (uint64_t)epoch_start);
    put_int64(payload_header + 24, (uint64_t)confirmed);
    PyObject *sent = NULL, *tags = PyTuple_New(link_count);
    if (tags == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < link_count; i++) {
        if (!gmac_tag_parts(gmacs[i], KIND_DATA, sequences[i], payload_header, DATA_HEADER_SIZE,
                            records, length, tags_made[i])) {
            PyErr_SetString(PyExc_RuntimeError, "libcrypto failed to compute a GMAC");
            goto fail;
        }
        PyObject *tag_object = PyBytes_FromStringAndSize((const char *)tags_made[i], MAC_BYTES);
        if (tag_object == NULL)
            goto fail;
        PyTuple_SET_ITEM(tags, i, tag_object);
    }
    int error_number;
    Py_BEGIN_ALLOW_THREADS
    error_number = write_at(fd, records, length, file_position);
    Py_END_ALLOW_THREADS
    if (error_number != 0) /* nothing of it stays, so nothing is sent */
        link_count = 0;
    size_t taken[LINKS_MAX];
    for (Py_ssize_t i = 0; i < link_count; i++)
        taken[i] = send_frame(socket_fds[i], head, payload_header, records, length, tags_made[i]);
    if ((sent = PyTuple_New(link_count)) == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < link_count; i++) {
        PyObject *taken_object = PyLong_FromSize_t(taken[i]);
        if (taken_object == NULL)
            goto fail;
        PyTuple_SET_ITEM(sent, i, taken_object);
    }
    if (error_number != 0) { /* no frame: no tags */
        Py_DECREF(tags);
        if ((tags = PyTuple_New(0)) == NULL)
            goto fail;
    }
    PyObject *result = Py_BuildValue("(iOONN)", error_number,
                                     error_number == 0 ? data : Py_None,
                                     error_number == 0 ? appended : Py_None, sent, tags);
    Py_DECREF(encoded);
    return result;
fail:
    Py_XDECREF(sent);
    Py_XDECREF(tags);
    Py_DECREF(encoded);
    return NULL;
}

/* ---- the link's socket on a thread of its own (ha/link_thread.py) ------------------------
 *
 * A `Follower` reads a slave's link on a thread of its own while every frame is common: it
 * waits for the socket, receives, takes the whole DATA frames with `apply_run`, and seals
 * and sends the ACK of each arrival that carried frames (the log's new end, or the last end
 * acknowledged for heartbeats alone), as ha/slave.py's `take` does in the loop's callback.
 * Nothing of it holds the GIL or touches a Python object: what Python needs of it (the
 * log's end to count, the confirmed offset, that the master was heard) is published in
 * atomics and read by `progress`; Python is woken through `event_fd` for the first arrival
 * after it `arm`ed, and when the thread ends. It ends on its own at the first frame it
 * declines, at a write that failed, when the peer ends the link or it breaks, and when
 * `stop` asks; the bytes it leaves unread, the MACs' counts and the log's end then go back
 * to the Python path (`stop`'s answer), which reads on from exactly there.
 *
 * Invariants: while the thread runs it is the only user of the socket, of both Gmacs and
 * of the segment's end (ha/link_thread.py holds the link's transport paused and writes
 * nothing); the published end is moved only after the records under it are written; an
 * ACK is sent only for records written. */

#define KIND_ACK 7 /* ha.wire.Kind.ACK */
#define ACK_FRAME_SIZE (FRAME_HEADER_SIZE + 8 + MAC_BYTES)
#define FIRST_CAPACITY (1 << 20)

/* Why a follower's thread ended (ha.link_thread.Ending). */
enum { END_RUNNING = 0, END_STOPPED, END_DECLINED, END_WRITE_FAILED, END_CLOSED, END_BROKEN,
       END_MAC_FAILED };

typedef struct {
    PyObject_HEAD
    Gmac *incoming, *outgoing;
    LogEnd log;
    uint64_t out_sequence;
    long long acked;
    int socket_fd, stop_fd, event_fd; /* socket_fd and log.fd: dups, the thread's own */
    unsigned char *buffer;
    size_t capacity, start, end;
    pthread_t thread;
    int started;                      /* a thread was started and is not joined */
    /* shared with Python, through atomics */
    long long published_end, published_confirmed;
    unsigned long long arrivals;
    int armed, ending, error_number;
} Follower;

static void
notify(Follower *self)
{
    uint64_t one = 1;
    ssize_t n;
    do
        n = write(self->event_fd, &one, sizeof(one));
    while (n < 0 && errno == EINTR);
}

/* Send all of bytes[0:length) on the non-blocking socket, waiting for room (or a stop):
 * 0, or the errno that ended it (-1 for a stop). */
static int
send_all(Follower *self, const unsigned char *bytes, size_t length)
{
    while (length > 0) {
        ssize_t n = send(self->socket_fd, bytes, length, MSG_NOSIGNAL);
        if (n > 0) {
            bytes += n;
            length -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return errno;
        struct pollfd wait[2] = {{self->socket_fd, POLLOUT, 0}, {self->stop_fd, POLLIN, 0}};
        if (poll(wait, 2, -1) < 0 && errno != EINTR)
            return errno;
        if (wait[1].revents)
            return -1;
    }
    return 0;
}

/* The ACK of the log's end `offset`: ha.wire.ack_frame. */
static int
send_ack(Follower *self, long long offset)
{
    unsigned char frame[ACK_FRAME_SIZE] = {KIND_ACK, 0, 0, 0, 8 + MAC_BYTES};
    for (int i = 0; i < 8; i++)
        frame[FRAME_HEADER_SIZE + i] = (unsigned char)((unsigned long long)offset >> (56 - 8 * i));
    if (!gmac_tag(self->outgoing, KIND_ACK, self->out_sequence, frame + FRAME_HEADER_SIZE, 8,
                  frame + FRAME_HEADER_SIZE + 8))
        return END_MAC_FAILED;
    self->out_sequence++;
    int failed = send_all(self, frame, sizeof(frame));
    if (failed == -1)
        return END_STOPPED;
    if (failed) {
        self->error_number = failed;
        return END_BROKEN;
    }
    self->acked = offset;
    return END_RUNNING;
}

/* Take what is buffered; acknowledge it; publish it: END_RUNNING to read on. */
static int
take_buffered(Follower *self)
{
    long long appended = self->log.appended, heartbeats = self->log.heartbeats;
    self->start += apply_run(&self->log, self->buffer + self->start, self->end - self->start);
    if (self->log.mac_failed)
        return END_MAC_FAILED;
    int taken = self->log.appended != appended || self->log.heartbeats != heartbeats;
    if (taken) {
        /* An ACK for the records written (after a failed write, for those before it), then
         * Python hears of them: its work on them (the dispatch) comes after the ACK. */
        int ending = send_ack(self, self->log.appended != appended ? self->log.write_offset
                                                                   : self->acked);
        if (ending != END_RUNNING)
            return ending;
        __atomic_store_n(&self->published_end, self->log.write_offset, __ATOMIC_RELEASE);
        __atomic_store_n(&self->published_confirmed, self->log.confirmed, __ATOMIC_RELEASE);
        __atomic_add_fetch(&self->arrivals, 1, __ATOMIC_RELEASE);
        if (__atomic_exchange_n(&self->armed, 0, __ATOMIC_ACQ_REL))
            notify(self);
    }
    if (self->log.stop == STOP_DECLINED)
        return END_DECLINED;
    if (self->log.stop == STOP_WRITE_FAILED) {
        self->error_number = self->log.error_number;
        return END_WRITE_FAILED;
    }
    return END_RUNNING;
}

/* Room for the rest of the frame that starts the unread bytes: they move to the buffer's
 * front, and the buffer grows to hold a frame larger than it (its length is checked by
 * `apply_run`, which declines one over MAX_FRAME_BYTES before anything waits for it). */
static int
make_room(Follower *self)
{
    size_t unread = self->end - self->start;
    if (self->start > 0) {
        memmove(self->buffer, self->buffer + self->start, unread);
        self->start = 0;
        self->end = unread;
    }
    size_t wanted = self->capacity;
    if (unread >= FRAME_HEADER_SIZE) {
        const unsigned char *frame = self->buffer;
        size_t body = ((size_t)frame[1] << 24) | ((size_t)frame[2] << 16) |
                      ((size_t)frame[3] << 8) | frame[4];
        if (FRAME_HEADER_SIZE + body > wanted)
            wanted = FRAME_HEADER_SIZE + body;
    }
    if (wanted > self->capacity) {
        unsigned char *grown = realloc(self->buffer, wanted);
        if (grown == NULL) {
            self->error_number = ENOMEM;
            return END_BROKEN;
        }
        self->buffer = grown;
        self->capacity = wanted;
    }
    return END_RUNNING;
}

static int
follow_link(Follower *self)
{
    for (;;) {
        int ending = self->end > self->start ? take_buffered(self) : END_RUNNING;
        if (ending == END_RUNNING)
            ending = make_room(self);
        if (ending != END_RUNNING)
            return ending;
        struct pollfd wait[2] = {{self->socket_fd, POLLIN, 0}, {self->stop_fd, POLLIN, 0}};
        if (poll(wait, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            self->error_number = errno;
            return END_BROKEN;
        }
        if (wait[1].revents)
            return END_STOPPED;
        if (self->end == self->capacity) /* cannot be: make_room left room for the frame */
            return END_DECLINED;
        ssize_t n = recv(self->socket_fd, self->buffer + self->end, self->capacity - self->end,
                         MSG_DONTWAIT);
        if (n == 0)
            return END_CLOSED;
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                continue;
            self->error_number = errno;
            return END_BROKEN;
        }
        self->end += (size_t)n;
    }
}

static void *
follower_thread(void *argument)
{
    Follower *self = argument;
    int ending = follow_link(self);
    __atomic_store_n(&self->ending, ending, __ATOMIC_RELEASE);
    notify(self);
    return NULL;
}

static void
follower_close_fds(Follower *self)
{
    if (self->socket_fd >= 0)
        close(self->socket_fd);
    if (self->log.fd >= 0)
        close(self->log.fd);
    self->socket_fd = self->log.fd = -1;
}

/* Join the thread (without the GIL: it never takes it), once. */
static void
follower_join(Follower *self)
{
    if (!self->started)
        return;
    uint64_t one = 1;
    ssize_t n;
    Py_BEGIN_ALLOW_THREADS
    do
        n = write(self->stop_fd, &one, sizeof(one));
    while (n < 0 && errno == EINTR);
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    self->started = 0;
    follower_close_fds(self);
}

static void
follower_dealloc(Follower *self)
{
    follower_join(self);
    if (self->stop_fd >= 0)
        close(self->stop_fd);
    if (self->event_fd >= 0)
        close(self->event_fd);
    free(self->buffer);
    Py_XDECREF(self->incoming);
    Py_XDECREF(self->outgoing);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
follower_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"incoming", "outgoing", NULL};
    Gmac *incoming, *outgoing;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!", keywords, &GmacType, &incoming,
                                     &GmacType, &outgoing))
        return NULL;
    Follower *self = (Follower *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->socket_fd = self->log.fd = self->stop_fd = self->event_fd = -1;
    Py_INCREF(incoming);
    Py_INCREF(outgoing);
    self->incoming = incoming;
    self->outgoing = outgoing;
    int error = 0; /* kept apart: the dealloc's close() may change errno */
    if ((self->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
        (self->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
        error = errno;
    else if ((self->buffer = malloc(FIRST_CAPACITY)) == NULL)
        error = ENOMEM;
    self->capacity = FIRST_CAPACITY;
    if (error) {
        Py_DECREF(self);
        errno = error;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return (PyObject *)self;
}

PyDoc_STRVAR(follower_start_doc,
"start(socket_fd, sequence, out_sequence, fd, position, room, write_offset, epoch, acked,\n"
"      unread)\n\n"
"Follow the link on a thread: `socket_fd` the link's socket, `sequence` and `out_sequence`\n"
"the next incoming and outgoing frames' numbers, (`fd`, `position`, `room`, `write_offset`,\n"
"`epoch`) the log's end as apply_frames takes it, `acked` the end last acknowledged,\n"
"`unread` the bytes that arrived and were not taken yet. Both fds are duplicated: the\n"
"thread's own until `stop`.");

static PyObject *
follower_start(Follower *self, PyObject *args)
{
    int socket_fd, fd;
    PyObject *sequence_object, *out_sequence_object;
    Py_buffer unread;
    LogEnd log = {.gmac = self->incoming, .confirmed = -1};
    long long acked;
    if (!PyArg_ParseTuple(args, "iOOiLLLLLy*", &socket_fd, &sequence_object,
                          &out_sequence_object, &fd, &log.position, &log.room,
                          &log.write_offset, &log.epoch, &acked, &unread))
        return NULL;
    uint64_t out_sequence;
    int ok = parse_sequence(sequence_object, &log.sequence) == 0 &&
             parse_sequence(out_sequence_object, &out_sequence) == 0;
    if (ok && (self->started || log.position < 0 || log.room < 0 ||
               (size_t)unread.len > self->capacity)) {
        PyErr_SetString(PyExc_ValueError, self->started ? "the follower runs already"
                                                        : "a negative position or room, or "
                                                          "more unread bytes than the buffer");
        ok = 0;
    }
    if (ok) {
        memcpy(self->buffer, unread.buf, (size_t)unread.len);
        self->start = 0;
        self->end = (size_t)unread.len;
    }
    PyBuffer_Release(&unread);
    if (!ok)
        return NULL;
    uint64_t drained;
    while (read(self->stop_fd, &drained, sizeof(drained)) > 0) /* an earlier stop's */
        ;
    self->socket_fd = dup(socket_fd);
    log.fd = dup(fd);
    self->log = log;
    self->out_sequence = out_sequence;
    self->acked = acked;
    self->error_number = 0;
    self->published_end = log.write_offset;
    self->published_confirmed = -1;
    self->armed = 1;
    self->ending = END_RUNNING;
    if (self->socket_fd < 0 || self->log.fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        follower_close_fds(self);
        return NULL;
    }
    int failed = pthread_create(&self->thread, NULL, follower_thread, self);
    if (failed) {
        follower_close_fds(self);
        errno = failed;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    self->started = 1;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(follower_progress_doc,
             "progress() -> (write_offset, confirmed, arrivals, ending)\n\n"
             "What the thread published: the log's end (records written), the greatest "
             "confirmed offset heard (-1: none), how many arrivals carried frames, and why it "
             "ended (0 while it runs).");

static PyObject *
follower_progress(Follower *self, PyObject *Py_UNUSED(ignored))
{
    /* The count first: the end and the confirmed offset stored before it was raised are
     * then seen, so a caller that remembers the count never misses an end (read the other
     * way round, an arrival's count could come with the end before it, and that arrival
     * would be counted only at the next one). */
    int ending = __atomic_load_n(&self->ending, __ATOMIC_ACQUIRE);
    unsigned long long arrivals = __atomic_load_n(&self->arrivals, __ATOMIC_ACQUIRE);
    long long end = __atomic_load_n(&self->published_end, __ATOMIC_ACQUIRE);
    long long confirmed = __atomic_load_n(&self->published_confirmed, __ATOMIC_ACQUIRE);
    return Py_BuildValue("(LLKi)", end, confirmed, arrivals, ending);
}

PyDoc_STRVAR(follower_arm_doc, "arm()\n\nWake Python (`event_fd`) at the next arrival.");

static PyObject *
follower_arm(Follower *self, PyObject *Py_UNUSED(ignored))
{
    __atomic_store_n(&self->armed, 1, __ATOMIC_RELEASE);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(follower_stop_doc,
"stop() -> (ending, errno, sequence, out_sequence, write_offset, confirmed, acked, unread)\n\n"
"End the thread (at once if it runs; its own ending if it ended) and join it: why it\n"
"ended, the errno of a failed write or a broken socket, the MACs' next numbers, the log's\n"
"end, the greatest confirmed offset heard (-1: none), the end last acknowledged and the\n"
"bytes it left unread, from which the Python path reads on.");

static PyObject *
follower_stop(Follower *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->started)
        return PyErr_Format(PyExc_ValueError, "the follower is not running");
    follower_join(self);
    int ending = self->ending == END_RUNNING ? END_STOPPED : self->ending;
    PyObject *unread = PyBytes_FromStringAndSize((const char *)self->buffer + self->start,
                                                 (Py_ssize_t)(self->end - self->start));
    if (unread == NULL)
        return NULL;
    self->start = self->end = 0;
    uint64_t drained;
    while (read(self->event_fd, &drained, sizeof(drained)) > 0)
        ;
    return Py_BuildValue("(iiKKLLLN)", ending, self->error_number,
                         (unsigned long long)self->log.sequence,
                         (unsigned long long)self->out_sequence, self->log.write_offset,
                         self->log.confirmed, self->acked, unread);
}

static PyObject *
follower_event_fd(Follower *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLong(self->event_fd);
}

static PyMethodDef follower_methods[] = {
    {"start", (PyCFunction)follower_start, METH_VARARGS, follower_start_doc},
    {"progress", (PyCFunction)follower_progress, METH_NOARGS, follower_progress_doc},
    {"arm", (PyCFunction)follower_arm, METH_NOARGS, follower_arm_doc},
    {"stop", (PyCFunction)follower_stop, METH_NOARGS, follower_stop_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef follower_getset[] = {
    {"event_fd", (getter)follower_event_fd, NULL,
     "Readable (an eventfd) at the first arrival after `arm` and when the thread ended.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FollowerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ha._replica_lane.Follower",
    .tp_basicsize = sizeof(Follower),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("Follower(incoming, outgoing): a slave's link read, appended and "
                        "acknowledged on a thread of its own (ha/link_thread.py)."),
    .tp_new = follower_new,
    .tp_dealloc = (destructor)follower_dealloc,
    .tp_methods = follower_methods,
    .tp_getset = follower_getset,
};

static PyMethodDef module_methods[] = {
    {"apply_frames", apply_frames, METH_VARARGS, apply_frames_doc},
    {"append_and_push", append_and_push, METH_VARARGS, append_and_push_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef lane_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ha._replica_lane",
    .m_doc = "The slave's end of a replication link in C, for the common DATA frame; "
             "ha/replica_lane.py has its twin.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__replica_lane(void)
{
    if (open_libcrypto() < 0 || PyType_Ready(&GmacType) < 0 || PyType_Ready(&FollowerType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&lane_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&GmacType);
    Py_INCREF(&FollowerType);
    if (PyModule_AddObject(module, "Gmac", (PyObject *)&GmacType) < 0 ||
        PyModule_AddObject(module, "Follower", (PyObject *)&FollowerType) < 0 ||
        PyModule_AddIntConstant(module, "STOP_MORE", STOP_MORE) < 0 ||
        PyModule_AddIntConstant(module, "STOP_DECLINED", STOP_DECLINED) < 0 ||
        PyModule_AddIntConstant(module, "STOP_WRITE_FAILED", STOP_WRITE_FAILED) < 0 ||
        PyModule_AddIntConstant(module, "MAX_FRAME_BYTES", MAX_FRAME_BYTES) < 0 ||
        PyModule_AddIntConstant(module, "MAC_BYTES", MAC_BYTES) < 0 ||
        PyModule_AddIntConstant(module, "LINKS_MAX", LINKS_MAX) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
