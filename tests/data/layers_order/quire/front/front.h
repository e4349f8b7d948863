#pragma once
#include "quire/back/back.h"
