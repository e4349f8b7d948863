#pragma once
#include "quire/front/front.h"
