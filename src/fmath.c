/*
 * fmath.c: the tables of fmath.h that more than one file reads
 * (sa_inverse, sa_exp_table): one copy in the library.
 */
#define SA_FMATH_TABLES
#include "fmath.h"
