// Its own folder's header: allowed.
#pragma once
