/* Vector loads and stores of W consecutive elements (W = 2, 4, 8, 16), spelled as element lists
 * instead of vloadW / vstoreW.
 *
 * Why: PoCL (3.0, the pip wheel) calls its vloadW, vstoreW and select builtins as out-of-line
 * functions, spilling every vector around each call: the buffer scans ran at half speed on it.
 * An element list is plain loads (stores) of consecutive addresses that the compiler merges into
 * one unaligned vector access; the bits are the same. Only element alignment is assumed, as vloadW. */
#ifndef PK_VLOAD_H
#define PK_VLOAD_H

#define PK_VCAT_(a, b) a##b
#define PK_VCAT(a, b) PK_VCAT_(a, b)

#define PK_E2(p) (p)[0], (p)[1]
#define PK_E4(p) PK_E2(p), (p)[2], (p)[3]
#define PK_E8(p) PK_E4(p), (p)[4], (p)[5], (p)[6], (p)[7]
#define PK_E16(p) PK_E8(p), (p)[8], (p)[9], (p)[10], (p)[11], (p)[12], (p)[13], (p)[14], (p)[15]
/* The W elements at p as a vector of T (p: an expression without side effects). */
#define PK_VLD(T, W, p) ((PK_VCAT(T, W))(PK_VCAT(PK_E, W)(p)))

#define PK_S2(v, p) (p)[0] = (v).s0; (p)[1] = (v).s1;
#define PK_S4(v, p) PK_S2(v, p) (p)[2] = (v).s2; (p)[3] = (v).s3;
#define PK_S8(v, p) PK_S4(v, p) (p)[4] = (v).s4; (p)[5] = (v).s5; (p)[6] = (v).s6; (p)[7] = (v).s7;
#define PK_S16(v, p)                                                                            \
    PK_S8(v, p) (p)[8] = (v).s8; (p)[9] = (v).s9; (p)[10] = (v).sa; (p)[11] = (v).sb;            \
    (p)[12] = (v).sc; (p)[13] = (v).sd; (p)[14] = (v).se; (p)[15] = (v).sf;
/* Store the W lanes of vector v at p (v, p: expressions without side effects). */
#define PK_VST(W, v, p)                                                                         \
    do {                                                                                        \
        PK_VCAT(PK_S, W)(v, p)                                                                  \
    } while (0)

#endif
