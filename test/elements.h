/* Element encoding for the multi-rank tests, written independently of the
 * library: a double stored as an element of any ofccl dtype, and read back.
 * bf16 and f16 round to nearest even (through f32); u8 stores the raw byte
 * (int)(v * 8). Test inputs are chosen exact in every dtype where a test
 * needs exact results. (test/outside keeps its own copy: it is built from
 * the installed headers only, as a user's program would be.) */
#ifndef OFCCL_TEST_ELEMENTS_H
#define OFCCL_TEST_ELEMENTS_H

#include <stdint.h>
#include <string.h>

#include "ofccl.h"

static inline uint16_t elem_f32_to_bf16(float f)
{
    uint32_t b;

    memcpy(&b, &f, 4);
    if ((b & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((b >> 16) | 0x40); /* quiet NaN */
    b += 0x7fffu + ((b >> 16) & 1u);         /* round to nearest even */
    return (uint16_t)(b >> 16);
}

static inline void store(ofccl_dtype_t dt, void *buf, size_t i, double v)
{
    if (dt == OFCCL_F32) {
        ((float *)buf)[i] = (float)v;
    } else if (dt == OFCCL_F64) {
        ((double *)buf)[i] = v;
    } else if (dt == OFCCL_BF16) {
        ((uint16_t *)buf)[i] = elem_f32_to_bf16((float)v);
    } else if (dt == OFCCL_U8) {
        ((uint8_t *)buf)[i] = (uint8_t)((int)(v * 8) & 0xff); /* raw bytes */
    } else {
        _Float16 h = (_Float16)(float)v;
        memcpy((uint16_t *)buf + i, &h, 2);
    }
}

static inline double load(ofccl_dtype_t dt, const void *buf, size_t i)
{
    if (dt == OFCCL_F32)
        return ((const float *)buf)[i];
    if (dt == OFCCL_F64)
        return ((const double *)buf)[i];
    if (dt == OFCCL_BF16) {
        uint32_t b = (uint32_t)((const uint16_t *)buf)[i] << 16;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    if (dt == OFCCL_U8)
        return ((const uint8_t *)buf)[i];
    _Float16 h;
    memcpy(&h, (const uint16_t *)buf + i, 2);
    return (double)h;
}

#endif
