//===- ArtifactFormat.h - forwards to dtc/artifact/ -------------*- C++ -*-===//
//
// Kept only while lib/Target/EmitArtifact.cpp still includes this path;
// remove it once every includer names dtc/artifact/ArtifactFormat.h.
//
//===----------------------------------------------------------------------===//
#include "dtc/artifact/ArtifactFormat.h"
