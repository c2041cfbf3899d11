/*
 * sizeclass.c: the size-class tables (size_classes/size_classes.h, which
 * every other file sees as declarations only): one copy in the library.
 */
#define SA_SIZE_CLASS_TABLES
#include "sizeclass.h"
